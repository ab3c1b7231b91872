import Foundation
import Testing

/// The operator CLI against the same running stack.
@Suite("syncctl", .enabled(if: E2E.enabled), .serialized)
struct SyncctlTests {
    /// Runs syncctl with the test environment and returns its exit code and standard output.
    func syncctl(_ arguments: String) throws -> (Int32, String) {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("syncctl-\(UUID().uuidString).out").path
        defer { try? FileManager.default.removeItem(atPath: output) }
        let status = E2E.shell("\(E2E.binaries)/syncctl \(arguments) > \(output) 2>/dev/null")
        return (status, (try? String(contentsOfFile: output, encoding: .utf8)) ?? "")
    }

    @Test func tokenMigrateAndJobsShow() async throws {
        try await Stack.with(workers: 1) { stack in
            let (migrated, migrateOutput) = try syncctl("migrate")
            #expect(migrated == 0)
            #expect(migrateOutput.contains("up to date"))

            let user = "cli-\(UUID().uuidString.prefix(6))"
            let (minted, tokenOutput) = try syncctl("token --user \(user) --ttl 10m")
            #expect(minted == 0)
            let token = tokenOutput.trimmingCharacters(in: .whitespacesAndNewlines)
            let api = stack.client
            let device = try await api.registerDevice(token)
            let push = try await api.push(token, device: device, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": "cli", "data": ["t": 1]],
            ])
            let job = try #require(push.json["job_id"] as? String)
            _ = try await api.awaitJob(token, job)

            let (shown, showOutput) = try syncctl("jobs show \(job)")
            #expect(shown == 0)
            let json = try #require(try JSONSerialization.jsonObject(with: Data(showOutput.utf8)) as? [String: Any])
            #expect(json["user_id"] as? String == user)
            #expect((json["job"] as? [String: Any])?["status"] as? String == "succeeded")
            #expect(try syncctl("jobs show \(UUID())").0 != 0)

            // An admin token is also an ordinary user token.
            let (_, adminToken) = try syncctl("token --user ops --admin")
            #expect(try await api.request("GET", "/v1/devices", token: adminToken.trimmingCharacters(in: .whitespacesAndNewlines)).status == 200)
        }
    }
}
