import Foundation
import Testing
import TestSupport

/// The app's rules over HTTP against real services, each test on a database of its own
/// (the rules are the whole deployment's): refusals at intake and at apply, authors and
/// immutable fields across two users, a change followed without a restart, a bad document
/// that changes nothing, and no document that changes nothing.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct RulesTests {
    static let recipesYAML = """
        # The meal planner's recipes: a title, whole minutes, a kind fixed at creation,
        # a price only the owner sets; the author or an owner deletes.
        default: deny
        collections:
          recipes:
            schema:
              type: object
              required: [title]
              properties:
                title: {type: string, minLength: 1, maxLength: 200}
                minutes: {type: integer, minimum: 0}
                kind: {enum: [main, dessert]}
                price: {type: number, minimum: 0}
            write:
              delete: [owner, author]
              publish: [owner]
              fields:
                price: [owner]
            immutable: [kind]
          notes: {}
        """

    static func op(_ type: String, _ id: String, _ data: [String: Any]? = nil, collection: String = "recipes") -> [String: Any] {
        var op: [String: Any] = ["op_id": newOpID(), "type": type, "collection": collection, "id": id]
        if let data { op["data"] = data }
        return op
    }

    static func push(_ api: APIClient, _ member: Member, _ space: String, _ ops: [[String: Any]]) async throws -> HTTPResult {
        try await api.json("POST", "/v1/sync/push", token: member.token, ["device_id": member.device, "space_id": space, "ops": ops])
    }

    /// Pushes and waits for the job; returns its results and the rules version that judged it.
    static func applied(
        _ api: APIClient, _ member: Member, _ space: String, _ ops: [[String: Any]]
    ) async throws -> (results: [[String: Any]], rulesVersion: Int?) {
        let pushed = try await push(api, member, space, ops)
        #expect(pushed.status == 202, "\(pushed.text)")
        let job = try await api.awaitJob(member.token, try #require(pushed.json["job_id"] as? String))
        #expect(job["status"] as? String == "succeeded")
        return (job["results"] as? [[String: Any]] ?? [], job["rules_version"] as? Int)
    }

    static func applyRules(_ api: APIClient, _ text: String, yaml: Bool = true) async throws -> HTTPResult {
        try await api.request(
            "PUT", "/v1/admin/rules", token: await E2E.token("rules-admin", admin: true), body: Data(text.utf8),
            headers: ["Content-Type": yaml ? "application/yaml" : "application/json"])
    }

    @Test func noDocumentChangesNothing() async throws {
        try await OwnDatabase.with { database in
            try await InProcessStack.with(workers: 1, environment: database.environment) { stack in
                let api = stack.client
                let owner = try await Member.make(api, "owner")
                let rules = try await api.request("GET", "/v1/rules", token: owner.token)
                #expect(rules.status == 200)
                #expect(rules.json["version"] as? Int == 0)
                #expect(rules.json["default"] as? String == "allow")
                #expect((rules.json["collections"] as? [String: Any])?.isEmpty == true)
                #expect(rules.header("ETag") == "\"rules-0\"")
                let revalidated = try await api.request("GET", "/v1/rules", token: owner.token, headers: ["If-None-Match": "\"rules-0\""])
                #expect(revalidated.status == 304)
                let admin = try await api.request("GET", "/v1/admin/rules", token: await E2E.token("rules-admin", admin: true))
                #expect(admin.status == 200 && admin.json["version"] as? Int == 0)
                #expect(try await api.request("GET", "/v1/admin/rules", token: owner.token).status == 403)

                let space = try await api.makeSpace(owner: owner)
                let (results, version) = try await Self.applied(api, owner, space, [
                    Self.op("upsert", "r1", ["anything": [1, 2]]), Self.op("upsert", "x", ["shape": "any"], collection: "whatever"),
                    Self.op("delete", "r1"),
                ])
                #expect(results.map { $0["status"] as? String } == ["applied", "applied", "applied"])
                #expect(version == 0)
            }
        }
    }

    @Test func everyRuleKindIsRefusedAtIntakeOrAtApply() async throws {
        try await OwnDatabase.with { database in
            try await InProcessStack.with(workers: 1, environment: database.environment) { stack in
                let api = stack.client
                let applied = try await Self.applyRules(api, Self.recipesYAML)
                #expect(applied.status == 200, "\(applied.text)")
                let version = try #require(applied.json["version"] as? Int)
                #expect(version == 1)
                let owner = try await Member.make(api, "owner"), editor = try await Member.make(api, "editor")
                let viewer = try await Member.make(api, "viewer")
                let space = try await api.makeSpace(owner: owner, with: [(editor, "editor"), (viewer, "viewer")])

                // At intake: what the op and the role decide. The push is refused whole, naming the op.
                let intake: [(Member, [String: Any], rule: String, pointer: String)] = [
                    (editor, Self.op("upsert", "r9", ["minutes": 5]), "recipes.schema", "/ops/1/data/title"),
                    (editor, Self.op("upsert", "r9", ["title": "Soup", "minutes": -1]), "recipes.schema", "/ops/1/data/minutes"),
                    (editor, Self.op("patch", "r9", ["title": NSNull()]), "recipes.schema", "/ops/1/data/title"),
                    (editor, Self.op("publish", "r9").merging(["public_id": "soup-r9"]) { $1 }, "recipes.write.publish", "/ops/1/type"),
                    (owner, Self.op("upsert", "t1", ["title": "x"], collection: "todos"), "default", "/ops/1/collection"),
                ]
                for (member, refused, rule, pointer) in intake {
                    let answer = try await Self.push(api, member, space, [Self.op("upsert", "ok", ["title": "fine"]), refused])
                    #expect(answer.status == 422, "\(answer.text)")
                    #expect(answer.json["code"] as? String == "invalid_request")
                    #expect(answer.json["rule"] as? String == rule)
                    #expect(answer.json["op_index"] as? Int == 1)
                    #expect(answer.json["pointer"] as? String == pointer)
                    #expect(answer.json["rules_version"] as? Int == version)
                }
                #expect(try await api.pullAll(owner.token, space: space).changes.isEmpty, "a refused push leaves nothing")
                #expect(try await Self.push(api, viewer, space, [Self.op("upsert", "v", ["title": "no"])]).status == 403)

                // At apply: what needs the stored record, across two users. The worker judges
                // the first job after the change by it: its apply reads the version.
                let created = try await Self.applied(api, owner, space, [
                    Self.op("upsert", "pie", ["title": "Pie", "kind": "dessert", "price": 4]),
                ])
                #expect(created.results.first?["status"] as? String == "applied")
                #expect(created.rulesVersion == version)
                let refused = try await Self.applied(api, editor, space, [
                    Self.op("patch", "pie", ["kind": "main"]),
                    Self.op("patch", "pie", ["price": 1]),
                    Self.op("delete", "pie"),
                    Self.op("upsert", "pie", ["title": "Pie again", "kind": "dessert", "price": 4]),
                    Self.op("upsert", "soup", ["title": "Soup", "kind": "main"]),
                    Self.op("delete", "soup"),
                ])
                #expect(refused.results.map { $0["status"] as? String } == ["rejected", "rejected", "rejected", "applied", "applied", "applied"])
                #expect(refused.results.map { $0["reason"] as? String } == ["rule", "rule", "rule", nil, nil, nil])
                #expect(refused.results.map { $0["rule"] as? String } == [
                    "recipes.immutable.kind", "recipes.fields.price", "recipes.write.delete", nil, nil, nil,
                ])
                #expect(refused.rulesVersion == version)
                // The owner may change the price and delete anyone's record; a kind is fixed for the owner too.
                let byOwner = try await Self.applied(api, owner, space, [
                    Self.op("patch", "pie", ["price": 5]), Self.op("patch", "pie", ["kind": "main"]), Self.op("delete", "soup"),
                ])
                #expect(byOwner.results.map { $0["status"] as? String } == ["applied", "rejected", "applied"])
                let state = latestState(try await api.pullAll(editor.token, space: space).changes)
                #expect(state["recipes/pie"]?["data"] as? [String: Any] as NSDictionary? == ["title": "Pie again", "kind": "dessert", "price": 5])
                #expect(state["recipes/soup"]?["deleted"] as? Bool == true)
            }
        }
    }

    @Test func aChangeIsFollowedByTwoGatewaysAndAWorkerWithoutARestart() async throws {
        try await OwnDatabase.with { database in
            try await Stack.with(workers: 1, environment: database.environment) { stack in
                let second = try await ServiceProcess.launch("gateway", environment: database.environment)
                defer { second.terminate(); _ = second.stop() }
                let first = stack.client, other = APIClient(base: "http://127.0.0.1:\(second.port)")
                let owner = try await Member.make(first, "owner"), editor = try await Member.make(first, "editor")
                let space = try await first.makeSpace(owner: owner, with: [(editor, "editor")])
                // Before: any shape, any change.
                for api in [first, other] {
                    #expect(try await Self.push(api, editor, space, [Self.op("upsert", "r0", ["minutes": 1])]).status == 202)
                }
                _ = try await Self.applied(first, owner, space, [Self.op("upsert", "pie", ["title": "Pie", "kind": "dessert"])])

                #expect(try await Self.applyRules(first, Self.recipesYAML).status == 200)
                // Both gateways refuse: the one that took the document at once, the other
                // within a few of its refreshes (RULES_REFRESH is 2 s; a loaded machine took
                // 8 s, so the bound is the wait's own).
                #expect(try await Self.push(first, editor, space, [Self.op("upsert", "r1", ["minutes": 1])]).status == 422)
                try await eventually(within: 10, "the second gateway follows the rules") {
                    try await Self.push(other, editor, space, [Self.op("upsert", "r1", ["minutes": 1])]).status == 422 ? true : nil
                }
                // And the worker judges by them: only an owner changes a price now (a new price
                // each time, so that every try is a change).
                let judged = try await eventually(within: 10, "the worker follows the rules") { () -> [String: Any]? in
                    let outcome = try await Self.applied(first, editor, space, [Self.op("patch", "pie", ["price": Int.random(in: 1...1_000_000)])])
                    return outcome.rulesVersion == 1 ? outcome.results[0] : nil
                }
                #expect(judged["status"] as? String == "rejected" && judged["rule"] as? String == "recipes.fields.price")

                // A second version that lets editors set prices: followed the same way.
                let relaxed = Self.recipesYAML.replacingOccurrences(of: "      fields:\n        price: [owner]\n", with: "")
                #expect(relaxed != Self.recipesYAML)
                let replaced = try await Self.applyRules(other, relaxed)
                #expect(replaced.json["version"] as? Int == 2, "\(replaced.text)")
                let after = try await eventually(within: 10, "the worker follows version 2") { () -> [String: Any]? in
                    let outcome = try await Self.applied(other, editor, space, [Self.op("patch", "pie", ["price": Int.random(in: 1...1_000_000)])])
                    return outcome.rulesVersion == 2 ? outcome.results[0] : nil
                }
                #expect(after["status"] as? String == "applied")
                let history = try await first.request("GET", "/v1/admin/rules/history", token: await E2E.token("rules-admin", admin: true))
                #expect((history.json["items"] as? [[String: Any]])?.map { $0["version"] as? Int } == [2, 1])
            }
        }
    }

    @Test func aBadDocumentIsRefusedWithWhereAndChangesNothing() async throws {
        try await OwnDatabase.with { database in
            try await InProcessStack.with(workers: 1, environment: database.environment) { stack in
                let api = stack.client
                #expect(try await Self.applyRules(api, Self.recipesYAML).status == 200)
                let bad: [(String, Bool, pointer: String)] = [
                    (#"{"collections": {"recipes": {"schema": {"type": "object", "maxProperties": 3}}}}"#, false,
                     "/collections/recipes/schema/maxProperties"),
                    (#"{"collections": {"recipes": {"schema": {"properties": {"n": {"minimum": "0"}}}}}}"#, false,
                     "/collections/recipes/schema/properties/n/minimum"),
                    (#"{"collections": {"recipes": {"schema": {"properties": {"c": {"pattern": "(["}}}}}}"#, false,
                     "/collections/recipes/schema/properties/c/pattern"),
                    (#"{"collections": {"recipes": {"schema": {"properties": {"n": {"minimum": 9, "maximum": 1}}}}}}"#, false,
                     "/collections/recipes/schema/properties/n/minimum"),
                    (#"{"collections": {"recipes": {"write": {"upsert": ["viewer"]}}}}"#, false, "/collections/recipes/write/upsert/0"),
                    (#"{"collections": "#, false, ""),
                    ("collections:\n  recipes:\n    immutable: kind\n", true, "/collections/recipes/immutable"),
                ]
                for (text, yaml, pointer) in bad {
                    let answer = try await Self.applyRules(api, text, yaml: yaml)
                    #expect(answer.status == 422, "\(text): \(answer.text)")
                    #expect(answer.json["pointer"] as? String == pointer, "\(text): \(answer.text)")
                }
                let yamlAnswer = try await Self.applyRules(api, "collections:\n  recipes:\n    immutable: kind\n")
                #expect((yamlAnswer.json["detail"] as? String)?.contains("(line 3)") == true, "\(yamlAnswer.text)")
                let html = try await api.request(
                    "PUT", "/v1/admin/rules", token: await E2E.token("rules-admin", admin: true), body: Data("x".utf8),
                    headers: ["Content-Type": "text/html"])
                #expect(html.status == 415)
                let member = try await Member.make(api, "member")
                #expect(try await api.request("PUT", "/v1/admin/rules", token: member.token, body: Data("{}".utf8)).status == 403)
                // Still version 1, which still refuses what it refused.
                let current = try await api.request("GET", "/v1/rules", token: member.token)
                #expect(current.json["version"] as? Int == 1)
                #expect((current.json["collections"] as? [String: Any])?.keys.sorted() == ["notes", "recipes"])

                // syncctl: the same check, the path named, nothing stored; then a good one.
                let file = NSTemporaryDirectory() + "rules-\(UUID().uuidString.prefix(6)).yaml"
                try "collections:\n  recipes:\n    write:\n      upsert: [viewer]\n".write(toFile: file, atomically: true, encoding: .utf8)
                let refusedByCLI = await Shell.runOffThePool("DATABASE_URL='\(database.url)' \(E2E.binaries)/syncctl rules apply \(file) 2>&1")
                #expect(refusedByCLI.status != 0)
                #expect(refusedByCLI.output.contains("/collections/recipes/write/upsert/0 (line 4)"), "\(refusedByCLI.output)")
                try "collections:\n  notes: {}\n".write(toFile: file, atomically: true, encoding: .utf8)
                let appliedByCLI = await Shell.runOffThePool(
                    "DATABASE_URL='\(database.url)' \(E2E.binaries)/syncctl rules apply --actor ops \(file) 2>&1")
                #expect(appliedByCLI.status == 0 && appliedByCLI.output.contains("applied rules version 2"), "\(appliedByCLI.output)")
                let shown = await Shell.runOffThePool("DATABASE_URL='\(database.url)' \(E2E.binaries)/syncctl rules show 2>/dev/null")
                let document = try JSONSerialization.jsonObject(with: Data(shown.output.utf8)) as? [String: Any]
                #expect(document?["version"] as? Int == 2 && document?["default"] as? String == "allow")
                let history = await Shell.runOffThePool("DATABASE_URL='\(database.url)' \(E2E.binaries)/syncctl rules history 2>/dev/null")
                let lines = history.output.split(separator: "\n")
                #expect(lines.count == 2 && lines[0].hasPrefix("2\t") && lines[0].contains("\tops\t"), "\(history.output)")
                try? FileManager.default.removeItem(atPath: file)
                let audit = try await api.request("GET", "/v1/admin/audit", token: await E2E.token("rules-admin", admin: true))
                #expect((audit.json["items"] as? [[String: Any]])?.filter { $0["action"] as? String == "rules_apply" }.count == 2)
            }
        }
    }
}
