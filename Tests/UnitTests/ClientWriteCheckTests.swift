import Foundation
import SynclineClient
import Testing

/// What the server would refuse is refused at the call, before anything is stored — so one
/// bad value never reaches the outbox to hold up the edits around it. Only the public API,
/// and only `import SynclineClient` (its public types come with it).
@Suite("Client write checks")
struct ClientWriteCheckTests {
    static func offlineClient() throws -> SyncClient {
        try SyncClient(ClientConfiguration(
            gatewayURL: URL(string: "http://127.0.0.1:9")!, databasePath: NSTemporaryDirectory() + "checks-\(UUID().uuidString).sqlite",
            tokenProvider: { _ in "unused" }, pollInterval: nil))
    }

    static func refusal(_ write: () async throws -> Void) async -> String? {
        do {
            try await write()
            return nil
        } catch ClientError.invalidOp(let detail) {
            return detail
        } catch {
            return "unexpected \(error)"
        }
    }

    @Test func whatTheServerWouldRefuseIsRefusedAtTheCallAndNothingIsQueued() async throws {
        let client = try Self.offlineClient()
        for n in 0..<5 { try await client.upsert("todos", id: "t\(n)", data: ["title": .string("keep \(n)")]) }
        let nan = await Self.refusal { try await client.upsert("todos", id: "bad", data: ["rating": .double(.nan)]) }
        #expect(nan?.contains("data.rating") == true && nan?.contains("finite") == true, "\(nan ?? "accepted")")
        let nested = await Self.refusal {
            try await client.patch("todos", id: "t1", fields: ["scores": .array([.int(1), .double(-.infinity)])])
        }
        #expect(nested?.contains("data.scores[1]") == true, "\(nested ?? "accepted")")
        #expect(await Self.refusal { try await client.upsert("Recipes", id: "r1", data: ["a": .int(1)]) }?.contains("collection") == true)
        #expect(await Self.refusal { try await client.upsert("my-items", id: "r1", data: ["a": .int(1)]) }?.contains("collection") == true)
        #expect(await Self.refusal { try await client.upsert("todos", id: "a/b", data: ["a": .int(1)]) }?.contains("id must") == true)
        let big = await Self.refusal {
            try await client.upsert("todos", id: "big", data: ["blob": .string(String(repeating: "x", count: 300 * 1024))])
        }
        #expect(big?.contains("more than 262144") == true, "\(big ?? "accepted")")
        #expect(await Self.refusal { try await client.patch("todos", id: "t1", fields: [:]) } != nil, "an empty patch")
        #expect(await Self.refusal { try await client.publish("todos", id: "t1", publicID: "No Spaces") }?.contains("public_id") == true)
        // No position in a batch: the app never sees one.
        #expect(nan?.contains("ops[") == false)

        let status = try await client.status()
        #expect(status.pendingOps == 5, "only the five good edits are queued: \(status)")
        #expect(try await client.records("todos").count == 5)
    }

    @Test func retryAndDropOfAnOpThatIsNotSetAsideThrow() async throws {
        let client = try Self.offlineClient()
        let pending = try await client.upsert("todos", id: "t1", data: ["title": .string("x")])
        for opID in [UUID().uuidString.lowercased(), pending] {
            await #expect(throws: ClientError.notSetAside(opID: opID)) { try await client.retry(opID: opID) }
            await #expect(throws: ClientError.notSetAside(opID: opID)) { try await client.drop(opID: opID) }
        }
    }

    @Test func syncThrowsAClientErrorTheAppCanSwitchOn() async throws {
        let client = try Self.offlineClient()
        try await client.upsert("todos", id: "t1", data: ["title": .string("x")])
        do {
            try await client.sync(timeout: 2)
            Issue.record("sync succeeded without a server")
        } catch ClientError.syncFailed(let reason, _) {
            #expect(!reason.isEmpty)
        } catch {
            Issue.record("sync threw \(type(of: error)): \(error)")
        }
    }
}
