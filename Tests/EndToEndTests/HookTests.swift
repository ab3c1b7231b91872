import Auth
import Foundation
import NIOConcurrencyHelpers
import PQBridge
import Testing
import TestSupport

/// Server mutators against a real HTTP receiver standing in for the app's backend, on a
/// database of their own (the rules are the deployment's): one request per job, answers
/// applied once, refusals as `hook:<reason>`, failures retried then dead-lettered, and a
/// replay once the backend is back.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct HookTests {
    static let secret = "hook-secret-0123456789"

    /// How the stand-in backend answers: by the calls' names, or with a failure.
    enum Mode: Sendable { case answer, fail(status: Int), slow(seconds: Double) }

    /// The app's backend: `reserve` patches the item's `reserved` and logs the call,
    /// `sell_out` is refused, `elsewhere` writes to another space, any other name is unknown.
    static func backend(_ mode: NIOLockedValueBox<Mode>, otherSpace: String = UUID().uuidString.lowercased()) throws -> WebhookReceiver {
        try WebhookReceiver { _, body in
            switch mode.withLockedValue({ $0 }) {
            case .fail(let status): return (status, 0, [])
            case .slow(let seconds): return (200, seconds, Array(#"{"calls": []}"#.utf8))
            case .answer: break
            }
            let request = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] ?? [:]
            let calls = request["calls"] as? [[String: Any]] ?? []
            let answers: [[String: Any]] = calls.map { call in
                let opID = call["op_id"] as? String ?? ""
                let args = call["args"] as? [String: Any] ?? [:]
                switch call["name"] as? String {
                case "reserve":
                    return ["op_id": opID, "ops": [
                        ["type": "patch", "collection": "items", "id": call["id"] as? String ?? "", "data": ["reserved": args["qty"] ?? 0]],
                        ["type": "upsert", "collection": "log", "id": "call-\(opID)", "data": ["by": request["user_id"] ?? "", "role": request["role"] ?? ""]],
                    ]]
                case "sell_out": return ["op_id": opID, "reject": "out_of_stock"]
                case "elsewhere":
                    return ["op_id": opID, "ops": [["type": "upsert", "collection": "log", "id": "x", "data": ["a": 1], "space_id": otherSpace]]]
                default: return ["op_id": opID, "reject": "unknown_call"]
                }
            }
            return (200, 0, Array(try! JSONSerialization.data(withJSONObject: ["calls": answers])))
        }
    }

    static func rules(hookPort: Int, timeout: String = "5s") -> String {
        """
        {"collections": {
          "items": {"hook": {"url": "http://127.0.0.1:\(hookPort)/calls", "secret": "\(secret)", "timeout": "\(timeout)"}},
          "log": {}, "plain": {}}}
        """
    }

    static func call(_ name: String, id: String = "i1", args: [String: Any] = [:], collection: String = "items") -> [String: Any] {
        ["op_id": newOpID(), "type": "call", "collection": collection, "id": id, "name": name, "args": args]
    }

    static func stack<T>(
        _ database: OwnDatabase, workers: Int = 1, _ body: (Stack) async throws -> T
    ) async throws -> T {
        try await Stack.with(
            workers: workers, environment: database.environment.merging(["ALLOW_PRIVATE_WEBHOOKS": "true"]) { $1 }, body)
    }

    static func applyRules(_ api: APIClient, _ text: String) async throws {
        let applied = try await api.request("PUT", "/v1/admin/rules", token: await E2E.token("hook-admin", admin: true), body: Data(text.utf8))
        #expect(applied.status == 200, "\(applied.text)")
    }

    @Test func oneRequestPerJobWithAllItsCallsAndTheAnswersAppliedInTheJob() async throws {
        let mode = NIOLockedValueBox(Mode.answer)
        let other = UUID().uuidString.lowercased()
        let backend = try Self.backend(mode, otherSpace: other)
        defer { backend.close() }
        try await OwnDatabase.with { database in
            try await Self.stack(database) { stack in
                let api = stack.client
                try await Self.applyRules(api, Self.rules(hookPort: backend.port))
                let owner = try await Member.make(api, "owner"), editor = try await Member.make(api, "editor")
                let space = try await api.makeSpace(owner: owner, with: [(editor, "editor")])
                _ = try await RulesTests.applied(api, owner, space, [["op_id": newOpID(), "type": "upsert", "collection": "items", "id": "i1", "data": ["name": "Rope", "reserved": 0]]])

                let calls = [
                    Self.call("reserve", args: ["qty": 3]), Self.call("sell_out"), Self.call("mystery"), Self.call("elsewhere"),
                ]
                let (results, _) = try await RulesTests.applied(api, editor, space, calls + [
                    ["op_id": newOpID(), "type": "upsert", "collection": "plain", "id": "p1", "data": ["a": 1]],
                ])
                #expect(backend.requests.count == 1, "one request for the job's four calls")
                #expect(results.map { $0["status"] as? String } == ["applied", "rejected", "rejected", "rejected", "applied"])
                #expect(results.map { $0["reason"] as? String } == [nil, "hook:out_of_stock", "hook:unknown_call", "hook:other_space", nil])

                let request = try #require(backend.requests.first)
                let signature = try #require(request.headers["syncline-signature"])
                #expect(WebhookSignature.isValid(signature, secret: Self.secret, body: request.body))
                let sent = try #require(try JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any])
                #expect(sent["space_id"] as? String == space && sent["user_id"] as? String == editor.user && sent["role"] as? String == "editor")
                let sentCalls = sent["calls"] as? [[String: Any]] ?? []
                #expect(sentCalls.map { $0["op_id"] as? String } == calls.map { $0["op_id"] as? String })
                #expect(((sentCalls.first?["record"] as? [String: Any])?["data"] as? [String: Any])?["name"] as? String == "Rope")

                let state = latestState(try await api.pullAll(owner.token, space: space).changes)
                #expect((state["items/i1"]?["data"] as? [String: Any])?["reserved"] as? Int == 3)
                #expect((state["log/call-\(calls[0]["op_id"]!)"]?["data"] as? [String: Any])?["role"] as? String == "editor")
                #expect(state["log/x"] == nil, "nothing lands in another space")

                // A 4xx refuses every call of the request, with the reason its body gives, or its status.
                mode.withLockedValue { $0 = .fail(status: 403) }
                let refused = try await RulesTests.applied(api, editor, space, [Self.call("reserve", args: ["qty": 1])])
                #expect(refused.results.first?["reason"] as? String == "hook:http_403")

                // A call where no hook answers is refused at intake; so is a call without a name.
                let noHook = try await RulesTests.push(api, editor, space, [Self.call("reserve", collection: "plain")])
                #expect(noHook.status == 422 && noHook.json["rule"] as? String == "plain.hook", "\(noHook.text)")
                var nameless = Self.call("reserve")
                nameless["name"] = "bad name!"
                let badName = try await RulesTests.push(api, editor, space, [nameless])
                #expect(badName.status == 422 && badName.json["pointer"] as? String == "/ops/0/name", "\(badName.text)")
            }
        }
    }

    @Test func aFailingSlowOrDownHookRetriesThenDeadLettersAndAReplayAppliesOnce() async throws {
        let mode = NIOLockedValueBox(Mode.fail(status: 500))
        let backend = try Self.backend(mode)
        defer { backend.close() }
        try await OwnDatabase.with { database in
            try await Self.stack(database) { stack in
                let api = stack.client
                try await Self.applyRules(api, Self.rules(hookPort: backend.port, timeout: "1s"))
                let owner = try await Member.make(api, "owner")
                let space = try await api.makeSpace(owner: owner)
                let admin = await E2E.token("hook-admin", admin: true)

                for failing in [Mode.fail(status: 500), .slow(seconds: 2)] {
                    mode.withLockedValue { $0 = failing }
                    let before = backend.requests.count
                    let pushed = try await RulesTests.push(api, owner, space, [Self.call("reserve", args: ["qty": 2])])
                    let jobID = try #require(pushed.json["job_id"] as? String)
                    let dead = try await api.awaitJob(owner.token, jobID, within: 30)
                    #expect(dead["status"] as? String == "dead", "\(failing)")
                    #expect(dead["attempts"] as? Int == E2E.maxAttempts)
                    #expect((dead["last_error"] as? String)?.contains("hook") == true, "\(dead)")
                    try await eventually(within: 5, "every attempt asked the hook") {
                        backend.requests.count - before >= E2E.maxAttempts ? true : nil
                    }

                    mode.withLockedValue { $0 = .answer }
                    let replay = try await api.request("POST", "/v1/admin/dead-letters/\(jobID)/replay", token: admin)
                    #expect(replay.status == 202, "\(replay.text)")
                    let replayed = try await api.awaitJob(owner.token, jobID, within: 15)
                    #expect(replayed["status"] as? String == "succeeded")
                    #expect((replayed["results"] as? [[String: Any]])?.first?["status"] as? String == "applied")
                }
                // A hook that is down (nothing listens at its address): the same, until it is back.
                let closed = try WebhookReceiver { _, _ in (200, 0, []) }
                let downPort = closed.port
                closed.close()
                try await Self.applyRules(api, Self.rules(hookPort: downPort, timeout: "1s"))
                let pushed = try await RulesTests.push(api, owner, space, [Self.call("reserve", args: ["qty": 3])])
                let downJob = try #require(pushed.json["job_id"] as? String)
                let dead = try await api.awaitJob(owner.token, downJob, within: 30)
                // Refused connections are retried by the HTTP client until the deadline: either may end an attempt.
                let said = dead["last_error"] as? String ?? ""
                #expect(dead["status"] as? String == "dead" && (said.contains("could not be reached") || said.contains("did not answer")), "\(dead)")
                mode.withLockedValue { $0 = .answer }
                try await Self.applyRules(api, Self.rules(hookPort: backend.port, timeout: "1s"))
                #expect(try await api.request("POST", "/v1/admin/dead-letters/\(downJob)/replay", token: admin).status == 202)
                let back = try await api.awaitJob(owner.token, downJob, within: 15)
                #expect((back["results"] as? [[String: Any]])?.first?["status"] as? String == "applied")
                // Each call's two ops applied once: the call and its ops remembered, nothing twice.
                let pool = PGPool(url: database.url, size: 1, logger: E2E.logger)
                let remembered = try await pool.value("SELECT count(*) FROM op_ids WHERE space_id = \(space)::uuid")
                await pool.shutdown()
                #expect(remembered == 9)
            }
        }
    }

    @Test func aWorkerKilledWhileAHookAnswersLeavesEachOpAppliedOnce() async throws {
        let requests = NIOLockedValueBox(0)
        // The first request is answered slowly: the worker asking it is killed meanwhile.
        let slowFirst = try WebhookReceiver { index, body in
            requests.withLockedValue { $0 += 1 }
            let request = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] ?? [:]
            let calls = (request["calls"] as? [[String: Any]] ?? []).map { call -> [String: Any] in
                ["op_id": call["op_id"] ?? "", "ops": [["type": "upsert", "collection": "log", "id": "n-\(call["op_id"] ?? "")", "data": ["n": index]]]]
            }
            return (200, index == 0 ? 3 : 0, Array(try! JSONSerialization.data(withJSONObject: ["calls": calls])))
        }
        defer { slowFirst.close() }
        try await OwnDatabase.with { database in
            try await Self.stack(database) { stack in
                let api = stack.client
                try await Self.applyRules(api, Self.rules(hookPort: slowFirst.port))
                let owner = try await Member.make(api, "owner")
                let space = try await api.makeSpace(owner: owner)
                let pushed = try await RulesTests.push(api, owner, space, [Self.call("reserve"), Self.call("reserve")])
                let jobID = try #require(pushed.json["job_id"] as? String)
                try await eventually(within: 10, "the hook is asked") { requests.withLockedValue { $0 } > 0 ? true : nil }
                stack.workers[0].signal(SIGKILL)
                try await stack.replaceGateway()
                try await stack.addWorker()
                let job = try await api.awaitJob(owner.token, jobID, within: 30)
                #expect(job["status"] as? String == "succeeded")
                #expect((job["results"] as? [[String: Any]])?.map { $0["status"] as? String } == ["applied", "applied"])
                #expect(requests.withLockedValue { $0 } >= 2, "asked again after the kill")
                let changes = try await api.pullAll(owner.token, space: space).changes
                #expect(changes.count == 2, "two records, each written once")
                let pool = PGPool(url: database.url, size: 1, logger: E2E.logger)
                let remembered = try await pool.value("SELECT count(*) FROM op_ids WHERE space_id = \(space)::uuid")
                let counter = try await pool.value("SELECT counter FROM space_counters WHERE space_id = \(space)::uuid", as: Int64.self)
                await pool.shutdown()
                #expect(remembered == 4)
                #expect(counter == 2)
            }
        }
    }
}
