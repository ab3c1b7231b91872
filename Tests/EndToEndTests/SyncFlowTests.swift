import AMQPBridge
import BrokerTopology
import Foundation
import PQBridge
import ServiceSupport
import SyncModels
import Testing
import TestSupport

@Suite("End to end: push → job → worker → pull", .enabled(if: E2E.enabled), .serialized, .timeLimit(.minutes(3)))
struct SyncFlowTests {
    /// 2 users × 2 devices push concurrently through a gateway and 2 workers; pulls converge.
    @Test func concurrentDevicesConvergeAndStayIsolated() async throws {
        try await Stack.with { stack in
            let api = stack.client
            let users = (0..<2).map { "e2e-\($0)-\(UUID().uuidString.prefix(6))" }
            var tokens: [String] = []
            for user in users { tokens.append(await E2E.token(user)) }
            var devices: [[String]] = []
            for token in tokens {
                devices.append([try await api.registerDevice(token, name: "a"), try await api.registerDevice(token, name: "b")])
            }
            let pushesPerDevice = 8
            let baseMillis = Int64(Date().timeIntervalSince1970 * 1000) - 60_000

            // Each push: an upsert of the device's own record (server-stamped) and a patch of a
            // shared record's per-device field with a client clock, so the last push must win
            // whatever order the workers apply them in.
            func ops(device: String, slot: Int, push: Int) -> [[String: Any]] {
                let hlc = String(format: "%013lld-%05d-%@", baseMillis + Int64(push), 0, device)
                return [
                    ["op_id": newOpID(), "type": "upsert", "collection": "todos", "id": "d\(slot)-p\(push)",
                     "data": ["title": "push \(push)", "n": push]],
                    ["op_id": newOpID(), "type": "patch", "collection": "shared", "id": "board",
                     "data": ["d\(slot)": push], "hlc": hlc],
                ]
            }

            var firstPushBody: (token: String, device: String, ops: [[String: Any]])?
            let jobs = try await withThrowingTaskGroup(of: [(String, String)].self) { group in
                for (u, token) in tokens.enumerated() {
                    for (slot, device) in devices[u].enumerated() {
                        group.addTask {
                            var ids: [(String, String)] = []
                            for push in 0..<pushesPerDevice {
                                let result = try await api.push(token, device: device, ops: ops(device: device, slot: slot, push: push))
                                guard result.status == 202, let job = result.json["job_id"] as? String else {
                                    throw StackError(description: "push answered \(result.status): \(result.text)")
                                }
                                // The job's address names its space, so that its status is read there.
                                let location = result.header("Location") ?? ""
                                #expect(location.hasPrefix("/v1/sync/jobs/\(job)?space_id=")
                                    && Names.canonicalUUID(String(location.split(separator: "=").last ?? "")) != nil, "\(location)")
                                ids.append((token, job))
                            }
                            return ids
                        }
                    }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            #expect(jobs.count == 2 * 2 * pushesPerDevice)
            for (token, job) in jobs {
                let view = try await api.awaitJob(token, job)
                #expect(view["status"] as? String == "succeeded", "\(view)")
                // The upsert of a fresh record always applies; the patch of the shared field
                // is superseded when a newer push of the same device got there first.
                let statuses = (view["results"] as? [[String: Any]])?.compactMap { $0["status"] as? String } ?? []
                #expect(statuses.first == "applied" && statuses.count == 2, "\(statuses)")
                #expect(["applied", "superseded"].contains(statuses.last ?? ""), "\(statuses)")
                #expect(view["checkpoint"] is String)
            }

            for (u, token) in tokens.enumerated() {
                let (changes, cursor) = try await api.pullAll(token)
                let state = latestState(changes)
                #expect(state.count == 2 * pushesPerDevice + 1)
                let board = state["shared/board"]?["data"] as? [String: Any]
                #expect(board?["d0"] as? Int == pushesPerDevice - 1)
                #expect(board?["d1"] as? Int == pushesPerDevice - 1)
                #expect((state["todos/d1-p3"]?["data"] as? [String: Any])?["title"] as? String == "push 3")
                // Versions are unique per user and the cursor is the last one.
                let versions = changes.compactMap { $0["version"] as? Int }
                #expect(Set(versions).count == versions.count)
                #expect(cursor == String(versions.max() ?? 0))
                // Both devices of the user see the same state (pulls are per user).
                let again = latestState(try await api.pullAll(token, limit: 1000).changes)
                #expect(Set(again.keys) == Set(state.keys))
                if u == 0 { firstPushBody = (token, devices[0][0], []) }
            }

            // Re-pushing ops already applied reports duplicate and changes nothing.
            let (token, device, _) = try #require(firstPushBody)
            let opID = newOpID()
            let op: [String: Any] = ["op_id": opID, "type": "patch", "collection": "todos", "id": "d0-p0", "data": ["x": 1]]
            let first = try await api.push(token, device: device, ops: [op])
            _ = try await api.awaitJob(token, first.json["job_id"] as! String)
            let cursorBefore = try await api.pullAll(token).cursor
            let repeatPush = try await api.push(token, device: device, ops: [op])
            let repeated = try await api.awaitJob(token, repeatPush.json["job_id"] as! String)
            #expect((repeated["results"] as? [[String: Any]])?.first?["status"] as? String == "duplicate")
            #expect(try await api.pullAll(token, since: cursorBefore).changes.isEmpty)

            // Isolation (isolation): user 1 sees none of user 0's devices, jobs or records.
            let (otherToken, ownerJob) = (tokens[1], jobs.first { $0.0 == tokens[0] }!.1)
            #expect(try await api.request("GET", "/v1/sync/jobs/\(ownerJob)", token: otherToken).status == 404)
            let foreignPush = try await api.push(otherToken, device: devices[0][0], ops: [op])
            #expect(foreignPush.status == 404)
            #expect(try await api.request("DELETE", "/v1/devices/\(devices[0][0])", token: otherToken).status == 404)
            let listed = try await api.request("GET", "/v1/devices", token: otherToken).json["items"] as? [[String: Any]]
            #expect(Set(listed?.compactMap { $0["device_id"] as? String } ?? []) == Set(devices[1]))
            let otherState = latestState(try await api.pullAll(otherToken).changes)
            #expect(otherState.keys.allSatisfy { !$0.hasPrefix("todos/d0-p") || otherState[$0]?["updated_by"] as? String != devices[0][0] })
            #expect(otherState.values.allSatisfy { devices[1].contains($0["updated_by"] as? String ?? "") })

            // Graceful shutdown: every process exits 0 on SIGTERM.
            let codes = stack.stop()
            #expect(codes.allSatisfy { $0 == 0 }, "exit codes \(codes)")
        }
    }

    /// No missed changes: while one applying transaction of a user is held open, other jobs of the same
    /// user commit around it; a device following cursors still receives every change.
    @Test func cursorFollowingDeviceMissesNothingWhileATransactionIsHeld() async throws {
        let pool = PGPool(url: E2E.databaseURL!, size: 1, logger: E2E.logger)
        let slow = "slowgap_\(UInt32.random(in: 0...UInt32.max))"
        try await pool.withConnection { connection in
            try connection.executeScript("""
                CREATE OR REPLACE FUNCTION \(slow)() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN PERFORM pg_sleep(2); RETURN NEW; END $$;
                CREATE TRIGGER \(slow) BEFORE INSERT OR UPDATE ON records
                  FOR EACH ROW WHEN (NEW.collection = '\(slow)') EXECUTE FUNCTION \(slow)();
                """)
        }
        do {
            try await InProcessStack.with(workers: 2) { stack in
                let api = stack.client
                let token = await E2E.token("gap-\(UUID().uuidString.prefix(6))")
                let writer = try await api.registerDevice(token, name: "writer")
                _ = try await api.registerDevice(token, name: "reader")
                var expected: Set<String> = []
                var jobIDs: [String] = []
                let slowPush = try await api.push(token, device: writer, ops: [
                    ["op_id": newOpID(), "type": "upsert", "collection": slow, "id": "held", "data": ["v": 1]],
                ])
                jobIDs.append(slowPush.json["job_id"] as! String)
                expected.insert("\(slow)/held")
                for index in 0..<6 {
                    let push = try await api.push(token, device: writer, ops: [
                        ["op_id": newOpID(), "type": "upsert", "collection": "fast", "id": "f\(index)", "data": ["v": index]],
                    ])
                    jobIDs.append(push.json["job_id"] as! String)
                    expected.insert("fast/f\(index)")
                }
                // The reader follows cursors the whole time, one small page after another.
                var cursor: String?
                var seen: Set<String> = []
                let deadline = Date().addingTimeInterval(30)
                while seen != expected && Date() < deadline {
                    let page = try await api.pullAll(token, since: cursor, limit: 2)
                    for change in page.changes { seen.insert("\(change["collection"]!)/\(change["id"]!)") }
                    cursor = page.cursor
                    try await Task.sleep(for: .milliseconds(50))
                }
                for job in jobIDs { #expect(try await api.awaitJob(token, job)["status"] as? String == "succeeded") }
                let final = try await api.pullAll(token, since: cursor, limit: 2)
                for change in final.changes { seen.insert("\(change["collection"]!)/\(change["id"]!)") }
                #expect(seen == expected)
            }
        } catch {
            try? await pool.withConnection { try $0.executeScript("DROP TRIGGER IF EXISTS \(slow) ON records; DROP FUNCTION IF EXISTS \(slow)();") }
            await pool.shutdown()
            throw error
        }
        try await pool.withConnection { try $0.executeScript("DROP TRIGGER IF EXISTS \(slow) ON records; DROP FUNCTION IF EXISTS \(slow)();") }
        await pool.shutdown()
    }

    /// An accepted push is never lost: with the broker down a push is still accepted, and the job runs once it is back.
    @Test func pushWhileBrokerIsDownSucceedsAfterItReturns() async throws {
        let broker = try OutageProxy(for: E2E.amqpURL!)
        defer { broker.close() }
        try await InProcessStack.with(environment: ["RELAY_AFTER": "500ms", "AMQP_URL": broker.routing(E2E.amqpURL!)]) { stack in
            let api = stack.client
            let token = await E2E.token("intake-\(UUID().uuidString.prefix(6))")
            let device = try await api.registerDevice(token)
            broker.cut()
            let push = try await api.push(token, device: device, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": "n1", "data": ["t": "offline"]],
            ])
            #expect(push.status == 202, "\(push.text)")
            let job = try #require(push.json["job_id"] as? String)
            try broker.restore()
            let view = try await api.awaitJob(token, job, within: 60)
            #expect(view["status"] as? String == "succeeded")
            #expect(try await api.pullAll(token).changes.count == 1)
        }
    }

    /// An accepted push is never lost, the other half: while PostgreSQL is down a push gets 503 with Retry-After (nothing
    /// is accepted that is not durable), and the gateway recovers by itself afterwards.
    @Test func pushWhileDatabaseIsDownIsRefusedWithRetryAfter() async throws {
        let database = try OutageProxy(for: E2E.databaseURL!)
        defer { database.close() }
        try await InProcessStack.with(workers: 1, environment: ["DATABASE_URL": database.routing(E2E.databaseURL!)]) { stack in
            let api = stack.client
            let token = await E2E.token("pgdown-\(UUID().uuidString.prefix(6))")
            let device = try await api.registerDevice(token)
            let op: () -> [[String: Any]] = { [["op_id": newOpID(), "type": "delete", "collection": "notes", "id": "x"]] }
            database.cut()
            let refused = try await api.push(token, device: device, ops: op())
            #expect(refused.status == 503, "\(refused.text)")
            #expect(refused.json["code"] as? String == "unavailable")
            #expect(refused.header("Retry-After") != nil)
            #expect(try await api.request("GET", "/readyz").status == 503)
            try database.restore()
            let accepted = try await eventually(within: 30, "push accepted again") {
                let result = try await api.push(token, device: device, ops: op())
                return result.status == 202 ? result : nil
            }
            let job = try #require(accepted.json["job_id"] as? String)
            #expect(try await api.awaitJob(token, job)["status"] as? String == "succeeded")
        }
    }

    /// A message on the jobs queue that is not a job is parked in the dead-letter queue
    /// (never acked as success, never a crash loop) while real jobs keep flowing.
    /// A push's job keeps a valid W3C `traceparent`; without one, or with a malformed one,
    /// the gateway starts a trace of its own.
    @Test func jobsCarryAW3CTraceparent() async throws {
        try await InProcessStack.with(workers: 0) { stack in
            let api = stack.client
            let token = await E2E.token("trace-\(UUID().uuidString.prefix(6))")
            let device = try await api.registerDevice(token)
            let given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
            var jobs: [String: String?] = [:]
            for header in [given, nil, "00-not-a-trace", "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01"] {
                let answer = try await api.push(token, device: device, ops: [
                    ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": "t", "data": [:] as [String: Any]],
                ], headers: header.map { ["traceparent": $0] } ?? [:])
                jobs[try #require(answer.json["job_id"] as? String, "\(answer.status) \(answer.text)")] = header
            }
            let pool = PGPool(url: E2E.databaseURL!, size: 1, logger: E2E.logger)
            let rows = try await pool.execute("SELECT job_id, trace_id FROM jobs WHERE job_id = ANY(\(Array(jobs.keys))::uuid[])")
                .map { try $0.decode((String, String?).self) }
            await pool.shutdown()
            #expect(rows.count == 4)
            let shape = /00-[0-9a-f]{32}-[0-9a-f]{16}-01/
            var generated = Set<String>()
            for (jobID, trace) in rows {
                let trace = try #require(trace)
                #expect(trace.wholeMatch(of: shape) != nil, "\(trace)")
                switch jobs[jobID] ?? nil {
                case given?: #expect(trace == given)
                case let header? where header.hasPrefix("00-0AF7"): #expect(trace == given, "kept, lowercased")
                default: generated.insert(trace)
                }
            }
            #expect(generated.count == 2, "each push without a valid traceparent starts its own trace")
        }
    }

    @Test func invalidMessageIsParkedAndWorkKeepsFlowing() async throws {
        try await Stack.with { stack in
            let endpoint = try #require(AMQPEndpoint(url: E2E.amqpURL!))
            let publisher = AMQPPublisher(endpoint: endpoint, topology: E2E.topology, logger: E2E.logger)
            let before = try await publisher.queueStats([SynclineTopology.deadLetterQueue]).first?.messages ?? 0
            try await publisher.publish([
                OutgoingMessage(exchange: SynclineTopology.jobsExchange, routingKey: SynclineTopology.jobsRoutingKey, body: Array("not json".utf8)),
                SynclineTopology.jobMessage(JobRef(space: .random(), job: .random()), traceID: nil),
            ])
            let api = stack.client
            let token = await E2E.token("poison-\(UUID().uuidString.prefix(6))")
            let device = try await api.registerDevice(token)
            let push = try await api.push(token, device: device, ops: [
                ["op_id": newOpID(), "type": "delete", "collection": "notes", "id": "gone"],
            ])
            #expect(try await api.awaitJob(token, push.json["job_id"] as! String)["status"] as? String == "succeeded")
            let parked = try await eventually(within: 15, "two dead letters") {
                let depth = try await publisher.queueStats([SynclineTopology.deadLetterQueue]).first?.messages ?? 0
                return depth >= before + 2 ? depth : nil
            }
            #expect(parked == before + 2)
            await publisher.shutdown()
            // The workers are still healthy.
            for worker in stack.workers {
                #expect(try await APIClient(base: "http://127.0.0.1:\(worker.port)").request("GET", "/readyz").status == 200)
            }
        }
    }
}
