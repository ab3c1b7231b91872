import Foundation
import SyncModels
import SynclineClient
import Testing
import TestSupport

/// Counters and sets against the real stack: devices of a shared space incrementing one
/// counter and editing one set while a worker is killed, and the ops' bad inputs.
@Suite(.serialized, .timeLimit(.minutes(5)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct CounterTests {
    static func device(_ stack: any TestStack, _ member: Member, space: String) throws -> SyncClient {
        let directory = E2E.environment["SYNCLINE_TEST_OUTPUT"] ?? NSTemporaryDirectory()
        let token = member.token
        return try SyncClient(ClientConfiguration(
            gatewayURL: URL(string: stack.client.base)!, databasePath: "\(directory)/counter-\(UUID().uuidString.prefix(8)).sqlite",
            spaceID: space, tokenProvider: { _ in token }, deviceName: "counter", pollInterval: 0.5))
    }

    /// Syncs until a pass succeeds (a killed worker leaves jobs to be redelivered).
    static func settle(_ client: SyncClient, within seconds: Double = 60) async throws {
        try await eventually(within: seconds, every: .milliseconds(200), "the device synced") {
            do {
                try await client.sync(timeout: 15)
                return try await client.status().pendingOps == 0 ? true : nil
            } catch {
                return nil
            }
        }
    }

    static func members(_ api: APIClient, _ count: Int) async throws -> (space: String, members: [Member]) {
        var members: [Member] = []
        for index in 0..<count { members.append(try await Member.make(api, "counting-\(index)")) }
        let space = try await api.makeSpace(owner: members[0], with: members.dropFirst().map { ($0, "editor") })
        return (space, members)
    }

    /// 19 devices increment one counter 100 times each through SynclineClient, syncing as
    /// they go, while workers are killed (SIGKILL) and replaced; a 20th pushes its 100
    /// increments itself, three times over under new idempotency keys and in other batches
    /// (the same op ids). The counter ends at exactly 2,000, on the server and on every device.
    @Test func twentyDevicesIncrementingOneCounterUnderKilledWorkersEndAtExactly2000() async throws {
        try await Stack.with(workers: 2, environment: ["WORKER_CONCURRENCY": "1"]) { stack in
            let api = stack.client
            let (space, members) = try await Self.members(api, 20)
            let devices = try members.dropLast().map { try Self.device(stack, $0, space: space) }
            let pusher = members.last!
            let opIDs = (0..<100).map { _ in UUID().uuidString.lowercased() }
            let killer = Task {
                for round in 0..<3 {
                    try await Task.sleep(for: .milliseconds(900))
                    let victim = round % stack.workers.count
                    stack.workers[victim].signal(SIGKILL)
                    stack.workers[victim].stop(within: 1)
                    stack.workers.remove(at: victim)
                    try await stack.addWorker()
                }
            }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for device in devices {
                    group.addTask {
                        for round in 0..<10 {
                            for _ in 0..<10 { try await device.increment("counters", id: "c1", field: "n", by: 1) }
                            if round % 3 == 2 { try? await device.sync(timeout: 5) }
                        }
                    }
                }
                group.addTask {
                    for (attempt, size) in [25, 40, 100].enumerated() {
                        for start in stride(from: 0, to: 100, by: size) {
                            let batch = opIDs[start..<min(start + size, 100)].map { opID -> [String: Any] in
                                ["op_id": opID, "type": "increment", "collection": "counters", "id": "c1", "field": "n", "by": 1]
                            }
                            let pushed = try await api.json(
                                "POST", "/v1/sync/push", token: pusher.token,
                                ["device_id": pusher.device, "space_id": space, "ops": batch],
                                headers: ["Idempotency-Key": "counter-\(attempt)-\(start)-\(UUID().uuidString)"])
                            #expect(pushed.status == 202, "\(pushed.text)")
                        }
                    }
                }
                try await group.waitForAll()
            }
            try await killer.value
            for device in devices { try await Self.settle(device) }
            let total = try await eventually(within: 60, "every increment applied") {
                let pulled = try await api.pullAll(pusher.token, limit: 1000, space: space).changes
                let value = pulled.first { $0["id"] as? String == "c1" }.flatMap { ($0["data"] as? [String: Any])?["n"] as? Int }
                return value == 2000 ? value : nil
            }
            #expect(total == 2000)
            for device in devices {
                try await Self.settle(device)
                let shown = try await device.record("counters", id: "c1")?.data["n"]
                #expect(shown == 2000, "a device shows \(String(describing: shown))")
            }
            for device in devices { await device.stop() }
        }
    }

    /// 20 devices each add ten tags of their own and a shared one, then remove half of their
    /// own, syncing between; every device ends with the same set, the one the rules give.
    @Test func twentyDevicesAddingAndRemovingTagsConvergeOnTheModel() async throws {
        try await InProcessStack.with(workers: 2) { stack in
            let api = stack.client
            let (space, members) = try await Self.members(api, 20)
            let devices = try members.map { try Self.device(stack, $0, space: space) }
            try await devices[0].upsert("lists", id: "l1", data: ["title": "crew", "tags": ["initial"]])
            try await Self.settle(devices[0])
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (index, device) in devices.enumerated() {
                    group.addTask {
                        try await device.sync(timeout: 20)
                        for k in 0..<10 { try await device.add("lists", id: "l1", field: "tags", values: [.string("t\(index)-\(k)"), "all"]) }
                        try? await device.sync(timeout: 5)
                        for k in stride(from: 1, to: 10, by: 2) { try await device.remove("lists", id: "l1", field: "tags", values: [.string("t\(index)-\(k)")]) }
                        if index == 0 { try await device.remove("lists", id: "l1", field: "tags", values: ["initial"]) }
                    }
                }
                try await group.waitForAll()
            }
            var model: Set<String> = ["all"]
            for index in 0..<20 { for k in stride(from: 0, to: 10, by: 2) { model.insert("t\(index)-\(k)") } }
            for device in devices { try await Self.settle(device) }
            var shown: [[String]] = []
            for device in devices {
                try await Self.settle(device)
                let tags = try await device.record("lists", id: "l1")?.data["tags"]?.arrayValue?.compactMap(\.stringValue) ?? []
                shown.append(tags)
                #expect(Set(tags) == model, "a device shows \(tags.count) tags")
                #expect(tags.count == model.count, "no element twice")
            }
            #expect(Set(shown.map { $0.joined(separator: ",") }).count == 1, "every device shows the same order")
            for device in devices { await device.stop() }
        }
    }

    /// What is wrong with an increment, add or remove is a clear 422 (or 400 for what is not
    /// JSON) naming the op's field, or a documented rejection in the job's results; never a
    /// 500, and a refused push makes no job.
    @Test func badIncrementsAndSetsAreClearRefusalsNeverAServerError() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let owner = try await Member.make(api, "bad-counter")
            func push(_ ops: [[String: Any]]) async throws -> HTTPResult {
                try await api.push(owner.token, device: owner.device, ops: ops)
            }
            func op(_ type: String, _ extra: [String: Any]) -> [String: Any] {
                ["op_id": UUID().uuidString.lowercased(), "type": type, "collection": "items", "id": "i1"].merging(extra) { $1 }
            }
            let refused: [(String, [String: Any], String)] = [
                ("by as text", op("increment", ["field": "n", "by": "1"]), "/ops/0/by"),
                ("no by", op("increment", ["field": "n"]), "/ops/0/by"),
                ("no field", op("increment", ["by": 1]), "/ops/0/field"),
                ("data beside the field", op("increment", ["field": "n", "by": 1, "data": ["n": 1]]), "/ops/0/data"),
                ("values not an array", op("add", ["field": "tags", "values": "x"]), "/ops/0/values"),
                ("no values", op("remove", ["field": "tags", "values": [Any]()]), "/ops/0/values"),
                ("10,000 values", op("add", ["field": "tags", "values": Array(0..<10_000)]), "/ops/0/values"),
            ]
            for (name, bad, pointer) in refused {
                let answer = try await push([bad])
                #expect(answer.status == 422, "\(name): \(answer.status) \(answer.text)")
                #expect(answer.json["pointer"] as? String == pointer, "\(name): \(answer.text)")
            }
            #expect(try await push([op("add", ["field": "tags", "values": Array(0..<10_000)])]).json["limit"] as? Int == 1000)
            // NaN is no JSON: the body is refused as such.
            let nan = try await api.request(
                "POST", "/v1/sync/push", token: owner.token,
                body: Data(#"{"device_id":"\#(owner.device)","ops":[{"op_id":"\#(UUID().uuidString)","type":"increment","collection":"items","id":"i1","field":"n","by":NaN}]}"#.utf8),
                headers: ["Content-Type": "application/json"])
            #expect(nan.status == 400, "\(nan.text)")
            // The largest finite numbers are numbers: taken, and a counter they would take past a
            // double's range stays at its bound (JSON has no infinity).
            let huge = try await push([op("increment", ["field": "n", "by": 1.7e308]), op("increment", ["field": "n", "by": 1.7e308])])
            #expect(huge.status == 202)
            let hugeJob = try await api.awaitJob(owner.token, try #require(huge.json["job_id"] as? String))
            #expect(hugeJob["status"] as? String == "succeeded")
            let bounded = try await api.pullAll(owner.token, limit: 100).changes.first { $0["id"] as? String == "i1" }
            #expect((bounded?["data"] as? [String: Any])?["n"] as? Double == Double.greatestFiniteMagnitude)

            // What needs the record: a documented rejection in the job's results.
            let setUp = try await push([op("upsert", ["data": ["title": "a", "tags": ["x"], "n": 2]])])
            _ = try await api.awaitJob(owner.token, try #require(setUp.json["job_id"] as? String))
            let pushed = try await push([
                op("increment", ["field": "title", "by": 1]), op("add", ["field": "n", "values": ["y"]]),
                op("increment", ["field": "tags", "by": 1]), op("increment", ["field": "n", "by": -0.5]),
                op("add", ["field": "tags", "values": ["y", ["nested": [1, 2]]]]),
            ])
            #expect(pushed.status == 202)
            let job = try await api.awaitJob(owner.token, try #require(pushed.json["job_id"] as? String))
            #expect(job["status"] as? String == "succeeded")
            let results = job["results"] as? [[String: Any]] ?? []
            #expect(results.map { $0["status"] as? String } == ["rejected", "rejected", "rejected", "applied", "applied"])
            #expect(results.prefix(3).map { $0["reason"] as? String } == ["not_a_number", "not_a_set", "not_a_number"])
            let record = try await api.pullAll(owner.token, limit: 100).changes.first { $0["id"] as? String == "i1" }
            let data = try #require(record?["data"] as? [String: Any])
            #expect(data["n"] as? Double == 1.5)
            #expect((data["tags"] as? [Any])?.count == 3)
            #expect(data["title"] as? String == "a")
        }
    }

    /// The rules' schema judges counters and sets: an increment that would take a counter
    /// below its minimum is rejected when applied (reason `rule`), one of a text field is
    /// refused at intake, and an add of a value the items' schema refuses too.
    @Test func aCountersMinimumIsHeldWhenTheIncrementIsApplied() async throws {
        try await OwnDatabase.with { database in
            try await InProcessStack.with(workers: 1, environment: database.environment) { stack in
                let api = stack.client
                let rules = try await RulesTests.applyRules(api, """
                    collections:
                      stock:
                        schema:
                          type: object
                          properties:
                            name: { type: string }
                            count: { type: integer, minimum: 0 }
                            tags: { type: array, items: { type: string }, maxItems: 3 }
                    """)
                #expect(rules.status == 200, "\(rules.text)")
                let owner = try await Member.make(api, "stock-keeper")
                let space = try await api.makeSpace(owner: owner)
                func op(_ type: String, _ extra: [String: Any]) -> [String: Any] {
                    ["op_id": UUID().uuidString.lowercased(), "type": type, "collection": "stock", "id": "flour"].merging(extra) { $1 }
                }
                _ = try await RulesTests.applied(api, owner, space, [op("upsert", ["data": ["name": "flour", "count": 3, "tags": ["dry"]]])])
                let (results, _) = try await RulesTests.applied(api, owner, space, [
                    op("increment", ["field": "count", "by": -2]), op("increment", ["field": "count", "by": -2]),
                    op("increment", ["field": "count", "by": 5]), op("add", ["field": "tags", "values": ["a", "b"]]),
                    op("add", ["field": "tags", "values": ["c"]]),
                ])
                #expect(results.map { $0["status"] as? String } == ["applied", "rejected", "applied", "applied", "rejected"])
                #expect(results[1]["reason"] as? String == "rule")
                #expect(results[1]["rule"] as? String == "stock.schema")
                #expect(results[4]["rule"] as? String == "stock.schema", "maxItems 3")
                let text = try await RulesTests.push(api, owner, space, [op("increment", ["field": "name", "by": 1])])
                #expect(text.status == 422)
                #expect(text.json["rule"] as? String == "stock.schema")
                let fraction = try await RulesTests.push(api, owner, space, [op("increment", ["field": "count", "by": 0.5])])
                #expect(fraction.status == 422, "an integer counter takes integer steps")
                let item = try await RulesTests.push(api, owner, space, [op("add", ["field": "tags", "values": [1]])])
                #expect(item.status == 422)
                #expect(item.json["pointer"] as? String == "/ops/0/values/0")
                let pulled = try await api.pullAll(owner.token, limit: 100, space: space).changes.first { $0["id"] as? String == "flour" }
                #expect((pulled?["data"] as? [String: Any])?["count"] as? Int == 6)
            }
        }
    }
}
