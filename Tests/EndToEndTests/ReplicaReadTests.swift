import Foundation
import SynclineClient
import Testing
import TestSupport

/// Pulls read from the cluster's streaming standby (`DATABASE_READ_URL`) while its replay
/// is paused (`pg_wal_replay_pause()`), so it lags the primary for as long as the test
/// wants: a pull there answers the replica's older snapshot with a cursor consistent with
/// it, and a device that asks for its job's checkpoint (`min_cursor`) still reads its
/// write, from the primary.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: Cluster.enabled, "needs SYNCLINE_CLUSTER and the cluster's URLs"))
struct ReplicaReadTests {
    @Test func aLaggingReplicaAnswersConsistentCursorsAndNeverHidesADevicesOwnWrites() async throws {
        let standby = try #require(Cluster.run("standby"), "the cluster has no standby")
        let replica = "postgresql://syncline:syncline@localhost:600\(standby.suffix(1))/syncline"
        try await Stack.with(environment: ["DATABASE_READ_URL": replica, "DATABASE_POOL_SIZE": "4"]) { stack in
            let api = stack.client
            let user = "replica-\(UUID().uuidString.prefix(8))"
            let token = await E2E.token(user)
            let device = try await api.registerDevice(token)

            func write(_ id: String) async throws -> String {
                let push = try await api.push(token, device: device, ops: [[
                    "op_id": newOpID(), "type": "upsert", "collection": "todos", "id": id, "data": ["title": id],
                ]])
                #expect(push.status == 202, "\(push.text)")
                let job = try await api.awaitJob(token, try #require(push.json["job_id"] as? String))
                #expect(job["status"] as? String == "succeeded")
                return try #require(job["checkpoint"] as? String)
            }
            func ids(_ changes: [[String: Any]]) -> Set<String> { Set(changes.compactMap { $0["id"] as? String }) }

            let first = try await write("before")
            let caughtUp = try await api.pullAll(token, minCursor: first)
            #expect(ids(caughtUp.changes) == ["before"])

            try Cluster.must("replay pause")
            var paused = true
            defer { if paused { Cluster.run("replay resume") } }
            let second = try await write("while-paused")

            // The replica's snapshot: the first write, and a cursor below the second's
            // checkpoint — consistent with what it returned.
            let stale = try await api.pullAll(token)
            #expect(ids(stale.changes) == ["before"], "the replica was not read, or did not lag")
            #expect(Int64(stale.cursor)! < Int64(second)!)
            // A device that asks for its checkpoint reads its write (the primary answers).
            let own = try await api.pullAll(token, minCursor: second)
            #expect(ids(own.changes) == ["before", "while-paused"])
            #expect(Int64(own.cursor)! >= Int64(second)!)

            // SynclineClient asks for its checkpoint itself: a new device writes, syncs, and
            // has pulled up to its own write although the replica still lags.
            let device2 = try ClientTests.device(stack, user: user)
            try await device2.client.upsert("todos", id: "from-client", data: ["title": "mine"])
            try await device2.client.sync()
            let onPrimary = try await api.pullAll(token, minCursor: "999999999999")
            let reached = try? await eventually(within: 5, "the client's pull") {
                await device2.log.events.contains { event in
                    if case .pulled(let cursor) = event { return cursor == onPrimary.cursor } else { return false }
                } ? true : nil
            }
            let events = await device2.log.events
            #expect(reached == true, "the client's pull stopped at the replica's snapshot: \(events)")
            #expect(try await device2.client.records("todos").map(\.id).sorted() == ["before", "from-client", "while-paused"])
            #expect(ids(try await api.pullAll(token).changes) == ["before"], "the replica caught up during the test")
            await device2.client.stop()
            device2.collector.cancel()

            // Replay resumed, the device that followed the replica's cursor gets what it lacked.
            try Cluster.must("replay resume")
            paused = false
            let resumed = try await eventually(within: 20, "the replica replays") {
                let page = try await api.pullAll(token, since: stale.cursor)
                return ids(page.changes) == ["while-paused", "from-client"] ? page : nil
            }
            #expect(resumed.cursor == onPrimary.cursor)

            let metrics = try await BatchingTests.metrics(of: stack.gateway)
            #expect(BatchingTests.metric("syncline_replica_reads_total", in: metrics) > 0)
            #expect(metrics.contains("outcome=\"replica_behind\""), "no pull fell back to the primary")
        }
    }
}
