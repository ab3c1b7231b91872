import Foundation
import SyncModels
import SynclineClient
import Testing
import TestSupport

/// The backup and restore recipe, run: a PostgreSQL of the test's own with a WAL archive
/// (`scripts/pitr-lab`), a base backup, writes after it, a restore to a point between
/// them, `syncctl restored`. A device that had pulled past the point gets 410, pulls the
/// restored data from the start, and pushes the ops it had not pushed; nothing of those is lost.
@Suite(.serialized, .timeLimit(.minutes(5)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct RestoreTests {
    static func lab(_ arguments: String) async throws -> String {
        let run = await Shell.runOffThePool("scripts/pitr-lab \(arguments) 2>&1")
        try #require(run.status == 0, "pitr-lab \(arguments): \(run.output)")
        return run.output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func write(_ api: APIClient, _ token: String, device: String, ids: Range<Int>) async throws {
        let ops: [[String: Any]] = ids.map {
            ["op_id": newOpID(), "type": "upsert", "collection": "todos", "id": "t\($0)", "data": ["n": $0]]
        }
        let pushed = try await api.push(token, device: device, ops: ops)
        #expect(try await api.awaitJob(token, try #require(pushed.json["job_id"] as? String))["status"] as? String == "succeeded")
    }

    @Test func aDeviceAheadOfARestoredDatabaseResyncsAndKeepsWhatItHadNotPushed() async throws {
        let directory = "/tmp/syncline-pitr-\(UUID().uuidString.prefix(8))"
        let url = try await Self.lab("up \(directory) \(E2E.freePort())")
        defer { _ = Shell.output("scripts/pitr-lab down \(directory)") }
        let migrated = await Shell.runOffThePool("DATABASE_URL='\(url)' \(E2E.binaries)/syncctl migrate 2>&1")
        try #require(migrated.status == 0, "\(migrated.output)")
        let environment = ["DATABASE_URL": url, "DATABASE_POOL_SIZE": "4"]
        let user = "restore-\(UUID().uuidString.prefix(6))"
        let token = await E2E.token(user)
        let path = "\(NSTemporaryDirectory())restore-\(UUID().uuidString.prefix(8)).sqlite"

        try await InProcessStack.with(workers: 1, environment: environment) { stack in
            let writer = try await stack.client.registerDevice(token, name: "writer")
            try await Self.write(stack.client, token, device: writer, ids: 0..<5)
            _ = try await Self.lab("base-backup \(directory)")
            try await Self.write(stack.client, token, device: writer, ids: 5..<10)
            _ = try await Self.lab("restore-point \(directory) before-the-loss")
            // What the restore will lose: written, and pulled by the device.
            try await Self.write(stack.client, token, device: writer, ids: 10..<15)
            let device = try ClientTests.device(stack, user: user, path: path)
            try await device.client.sync()
            #expect(try await ClientTests.shown(device.client).count == 15)
            await device.client.stop()
        }

        // The disaster: the database is restored to the point before the last writes; the
        // device, offline meanwhile, writes on.
        _ = try await Self.lab("restore \(directory) before-the-loss")
        let restored = await Shell.runOffThePool("DATABASE_URL='\(url)' \(E2E.binaries)/syncctl restored 2>&1")
        try #require(restored.status == 0, "\(restored.output)")
        #expect(restored.output.contains("generation 2"), "\(restored.output)")

        try await InProcessStack.with(workers: 1, environment: environment) { stack in
            let device = try ClientTests.device(stack, user: user, path: path)
            try await device.client.upsert("todos", id: "offline-1", data: ["n": 100])
            try await device.client.upsert("todos", id: "t12", data: ["n": 112])
            let pending = try await device.client.status().pendingOps
            #expect(pending == 2)
            // The device registered after the backup was made: the server no longer knows
            // it, and it registers again; its cursor is past what was restored: 410, and it
            // pulls from the start.
            try? await device.client.sync()
            try await device.client.sync()
            // The device holds what the server holds now: the restored records, and its own
            // ops that it had not pushed, applied; the lost writes it had only pulled are gone.
            let shown = try await ClientTests.shown(device.client)
            let server = try await ClientTests.server(stack, user)
            #expect(shown == server)
            #expect(Set(server.keys) == Set((0..<10).map { "t\($0)" } + ["offline-1", "t12"]))
            #expect(server["t12"]?["n"] == .int(112))
            #expect(try await device.client.status().pendingOps == 0)
            // A cursor from before the restore point goes on without a resync.
            let pulled = try await stack.client.pullAll(token, since: "3", limit: 100)
            #expect(pulled.changes.count >= 6)
            await device.client.stop()
        }
    }
}
