import Foundation
import PQBridge
import Testing
import TestSupport

/// `DELETE /v1/me` and `syncctl users delete`: every table forgets the user, their public
/// content and streams go, their queued pushes are never applied, other users stay.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct AccountDeletionTests {
    static let tables = ["jobs", "devices", "dead_letters", "user_clocks", "space_members"]
    static let spaceTables = ["records", "op_ids", "space_counters"]

    /// Rows naming `user` in each table that holds user data, and rows of the user's
    /// personal space — or of any space that no longer exists (none ever should).
    func rowsOf(_ user: String, pool: PGPool) async throws -> [String: Int64] {
        var counts: [String: Int64] = [:]
        for table in Self.tables {
            counts[table] = try await pool.value("SELECT count(*) FROM \(sql: table) WHERE user_id = \(user)", as: Int64.self)
        }
        counts["spaces (personal)"] = try await pool.value(
            "SELECT count(*) FROM spaces WHERE personal_of = \(user)", as: Int64.self)
        for table in Self.spaceTables {
            counts[table] = try await pool.value("""
                SELECT count(*) FROM \(sql: table)
                WHERE space_id = (SELECT space_id FROM spaces WHERE personal_of = \(user))
                   OR NOT EXISTS (SELECT 1 FROM spaces s WHERE s.space_id = \(sql: table).space_id)
                """, as: Int64.self)
        }
        counts["account_deletions (user id kept)"] = try await pool.value(
            "SELECT count(*) FROM account_deletions WHERE user_id = \(user)", as: Int64.self)
        return counts
    }

    @Test func deletingAnAccountLeavesNothingOfTheUser() async throws {
        let failing = try await FailureTests.FailingCollection("doomed")
        let pool = PGPool(url: E2E.databaseURL!, size: 1, logger: E2E.logger)
        try await InProcessStack.with(workers: 1, fanouts: 1) { stack in
            let api = stack.client
            let user = "leaver-\(UUID().uuidString.prefix(6))", neighbour = "stayer-\(UUID().uuidString.prefix(6))"
            let (token, otherToken) = (await E2E.token(user, name: "Leaver"), await E2E.token(neighbour))
            let device = try await api.registerDevice(token)
            let otherDevice = try await api.registerDevice(otherToken)
            let publicID = "leaver-guide-\(UUID().uuidString.prefix(6).lowercased())"
            let setup = try await api.push(token, device: device, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "guides", "id": "g1", "data": ["title": "Reefing"]],
                ["op_id": newOpID(), "type": "publish", "collection": "guides", "id": "g1", "public_id": publicID],
                ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": "n1", "data": ["t": 1]],
                ["op_id": newOpID(), "type": "delete", "collection": "notes", "id": "n1"],
            ], headers: ["Idempotency-Key": "setup-1"])
            _ = try await api.awaitJob(token, try #require(setup.json["job_id"] as? String))
            #expect(try await api.request("GET", "/v1/public/\(publicID)").status == 200)
            // A dead letter of the user.
            let doomed = try await api.push(token, device: device, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "doomed", "id": "d1", "data": ["t": 1]],
            ])
            #expect(try await api.awaitJob(token, try #require(doomed.json["job_id"] as? String))["status"] as? String == "dead")
            try await failing.remove()
            let kept = try await api.push(otherToken, device: otherDevice, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": "mine", "data": ["t": 1]],
            ])
            _ = try await api.awaitJob(otherToken, try #require(kept.json["job_id"] as? String))
            let stream = try SSEClient(port: stack.fanoutPorts[0], path: "/v1/stream?device_id=\(device)&access_token=\(token)")
            defer { stream.close() }
            _ = try await stream.inbox.next("hello")
            let before = try await rowsOf(user, pool: pool)
            #expect(before["records"] == 2 && before["dead_letters"] == 1 && before["devices"] == 1, "\(before)")

            let deleted = try await api.request("DELETE", "/v1/me", token: token)
            #expect(deleted.status == 204, "\(deleted.status) \(deleted.text)")
            let after = try await rowsOf(user, pool: pool)
            #expect(after.values.allSatisfy { $0 == 0 }, "rows left: \(after)")
            #expect(try await api.request("GET", "/v1/public/\(publicID)").status == 404)
            _ = try await eventually(within: 3, "the stream closed") { stream.inbox.finished ? true : nil }
            let status = try await api.request("GET", "/v1/me/deletion", token: token)
            #expect(status.status == 200 && status.json["status"] as? String == "done", "\(status.text)")
            // Deleting again is fine; the neighbour is untouched.
            #expect(try await api.request("DELETE", "/v1/me", token: token).status == 204)
            let (changes, _) = try await api.pullAll(otherToken)
            #expect(changes.map { $0["id"] as? String } == ["mine"])
            #expect(try await api.request("GET", "/v1/devices", token: otherToken).json["items"].map { ($0 as? [Any])?.count } == 1)
        }
        await pool.shutdown()
    }

    /// With no time to finish inside the request, the deletion answers 202 with its status
    /// URL and finishes on its own.
    @Test func aLargeDeletionAnswers202AndFinishes() async throws {
        let pool = PGPool(url: E2E.databaseURL!, size: 1, logger: E2E.logger)
        try await InProcessStack.with(workers: 1, environment: ["ACCOUNT_DELETION_INLINE": "0s"]) { stack in
            let api = stack.client
            let user = "large-\(UUID().uuidString.prefix(6))"
            let token = await E2E.token(user)
            let device = try await api.registerDevice(token)
            let push = try await api.push(token, device: device, ops: (0..<50).map { index in
                ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": "n\(index)", "data": ["t": index]]
            })
            _ = try await api.awaitJob(token, try #require(push.json["job_id"] as? String))
            let deleted = try await api.request("DELETE", "/v1/me", token: token)
            #expect(deleted.status == 202 && deleted.header("Location") == "/v1/me/deletion", "\(deleted.status) \(deleted.text)")
            #expect(deleted.json["status"] as? String == "in_progress")
            _ = try await eventually(within: 10, "the deletion done") {
                try await api.request("GET", "/v1/me/deletion", token: token).json["status"] as? String == "done" ? true : nil
            }
            let after = try await rowsOf(user, pool: pool)
            #expect(after.values.allSatisfy { $0 == 0 }, "rows left: \(after)")
        }
        await pool.shutdown()
    }

    @Test func pushesStillQueuedAreNeverApplied() async throws {
        let pool = PGPool(url: E2E.databaseURL!, size: 1, logger: E2E.logger)
        // No worker yet: the push waits in the queue while the account is deleted.
        try await Stack.with(workers: 0) { stack in
            let api = stack.client
            let user = "queued-\(UUID().uuidString.prefix(6))"
            let device = try await api.registerDevice(await E2E.token(user))
            let push = try await api.push(await E2E.token(user), device: device, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": "late", "data": ["t": 1]],
            ])
            #expect(push.status == 202)
            let output = FileManager.default.temporaryDirectory.appendingPathComponent("users-delete-\(UUID().uuidString).log").path
            let status = Shell.run("\(E2E.binaries)/syncctl users delete \(user) > \(output) 2>&1")
            #expect(status == 0, "\((try? String(contentsOfFile: output, encoding: .utf8)) ?? "")")
            try await stack.addWorker()
            let log = try #require(stack.workers.last?.logPath)
            _ = try await eventually(within: 10, "the worker met the queued job") {
                (try? String(contentsOfFile: log, encoding: .utf8))?.contains("dropped a job of a deleted account") == true ? true : nil
            }
            let after = try await rowsOf(user, pool: pool)
            #expect(after.values.allSatisfy { $0 == 0 }, "rows left after the queued job was delivered: \(after)")
            let jobID = try #require(push.json["job_id"] as? String)
            let deadLetters = try await pool.value("SELECT count(*) FROM dead_letters WHERE job_id = \(jobID)::uuid")
            #expect(deadLetters == 0, "a deleted account's job is dropped, not dead-lettered")
        }
        await pool.shutdown()
    }
}
