import Auth
import Foundation
import NIOConcurrencyHelpers
import Testing
import TestSupport

/// The app's backend against real services, on a database of its own (service tokens,
/// feeds and rules are the deployment's): service tokens and their scope, the data API,
/// and the record feed through an outage of its receiver and a killed worker.
@Suite(.serialized, .timeLimit(.minutes(5)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct BackendTests {
    static func admin() async -> String { await E2E.token("backend-admin", admin: true) }

    static func createToken(_ api: APIClient, name: String, spaces: [String]?, readOnly: Bool = false) async throws -> (id: String, token: String) {
        var body: [String: Any] = ["name": name, "read_only": readOnly]
        if let spaces { body["spaces"] = spaces }
        let created = try await api.json("POST", "/v1/admin/service-tokens", token: await admin(), body)
        try #require(created.status == 201, "\(created.text)")
        let view = try #require(created.json["service_token"] as? [String: Any])
        return (try #require(view["token_id"] as? String), try #require(created.json["token"] as? String))
    }

    /// Pushes `ops` as the service and waits for the job; answers the job's view.
    static func servicePush(_ api: APIClient, _ token: String, space: String, _ ops: [[String: Any]]) async throws -> [String: Any] {
        let pushed = try await api.json("POST", "/v1/service/spaces/\(space)/push", token: token, ["ops": ops])
        try #require(pushed.status == 202, "\(pushed.text)")
        let job = try #require(pushed.json["job_id"] as? String)
        #expect(pushed.header("Location") == "/v1/service/spaces/\(space)/jobs/\(job)")
        return try await eventually(within: 30, "service job \(job)") {
            let view = try await api.request("GET", "/v1/service/spaces/\(space)/jobs/\(job)", token: token).json
            return ["succeeded", "dead"].contains(view["status"] as? String ?? "") ? view : nil
        }
    }

    /// Every page of a query, following the cursors.
    static func queryAll(_ api: APIClient, _ token: String, space: String, _ query: [String: Any]) async throws -> [[String: Any]] {
        var records: [[String: Any]] = []
        var body = query
        while true {
            let page = try await api.json("POST", "/v1/service/spaces/\(space)/query", token: token, body)
            try #require(page.status == 200, "\(page.text)")
            records += page.json["records"] as? [[String: Any]] ?? []
            guard let next = page.json["next_cursor"] as? String else { return records }
            body["cursor"] = next
        }
    }

    @Test func aServiceReadsWithFiltersAndCursorsAndWritesIntoTheSpacesOfItsScopeOnly() async throws {
        try await OwnDatabase.with { database in
            try await InProcessStack.with(workers: 1, fanouts: 1, environment: database.environment) { stack in
                let api = stack.client
                let alice = try await Member.make(api, "alice"), bob = try await Member.make(api, "bob")
                let kitchen = try await api.makeSpace(owner: alice, name: "Kitchen")
                let garden = try await api.makeSpace(owner: alice, name: "Garden")
                let attic = try await api.makeSpace(owner: alice, name: "Attic")
                let (tokenID, token) = try await Self.createToken(api, name: "catalog importer", spaces: [kitchen, garden])

                // The service writes into both spaces of its scope, as one job each; a device's
                // write sits beside them.
                let recipes: [[String: Any]] = (0..<23).map { index in
                    ["op_id": newOpID(), "type": "upsert", "collection": "recipes", "id": "r\(index)",
                     "data": ["title": index % 3 == 0 ? "Quick soup \(index)" : "Stew \(index)", "minutes": index * 5,
                              "tags": index % 2 == 0 ? ["quick", "veg"] : ["slow"]]]
                }
                let job = try await Self.servicePush(api, token, space: kitchen, recipes)
                #expect(job["status"] as? String == "succeeded")
                let gardenJob = try await Self.servicePush(api, token, space: garden, [
                    ["op_id": newOpID(), "type": "upsert", "collection": "beds", "id": "b1", "data": ["rows": 4]],
                ])
                #expect(gardenJob["status"] as? String == "succeeded")
                let byDevice = try await api.json("POST", "/v1/sync/push", token: alice.token, [
                    "device_id": alice.device, "space_id": kitchen,
                    "ops": [["op_id": newOpID(), "type": "delete", "collection": "recipes", "id": "r22"]],
                ])
                _ = try await api.awaitJob(alice.token, try #require(byDevice.json["job_id"] as? String))

                // Filters, an order and pages of 4: exactly what the data says, in order, once each.
                let query: [String: Any] = [
                    "collection": "recipes", "limit": 4,
                    "where": [["field": "minutes", "op": "<", "value": 80], ["field": "tags", "op": "contains", "value": "quick"]],
                    "order": [["field": "minutes", "direction": "desc"]],
                ]
                let found = try await Self.queryAll(api, token, space: kitchen, query)
                let expected = (0..<22).filter { $0 % 2 == 0 && $0 * 5 < 80 }.sorted(by: >).map { "r\($0)" }
                #expect(found.map { $0["id"] as? String ?? "" } == expected)
                #expect(found.allSatisfy { $0["changed_by"] as? String == "service:\(tokenID)" && $0["job_id"] as? String == job["job_id"] as? String })
                let soups = try await Self.queryAll(api, token, space: kitchen, [
                    "collection": "recipes", "where": [["field": "title", "op": "contains", "value": "QUICK"]],
                ])
                #expect(Set(soups.map { $0["id"] as? String ?? "" }) == Set((0..<22).filter { $0 % 3 == 0 }.map { "r\($0)" }))
                let withDeleted = try await Self.queryAll(api, token, space: kitchen, ["collection": "recipes", "include_deleted": true])
                #expect(withDeleted.count == 23)
                #expect(withDeleted.first { $0["id"] as? String == "r22" }?["deleted"] as? Bool == true)
                // A device sees what the service wrote, authored by it.
                let pulled = try await api.pullAll(alice.token, limit: 100, space: kitchen).changes
                #expect(pulled.count == 23)

                // Outside the scope: 404 exactly as an unknown space; a bad query: 422 naming where.
                for space in [attic, UUID().uuidString.lowercased()] {
                    let refused = try await api.json("POST", "/v1/service/spaces/\(space)/query", token: token, ["collection": "recipes"])
                    #expect(refused.status == 404)
                    let push = try await api.json("POST", "/v1/service/spaces/\(space)/push", token: token, ["ops": recipes])
                    #expect(push.status == 404)
                }
                let bad = try await api.json("POST", "/v1/service/spaces/\(kitchen)/query", token: token, [
                    "collection": "recipes", "where": [["field": "minutes", "op": "~", "value": 1]],
                ])
                #expect(bad.status == 422)
                #expect(bad.json["pointer"] as? String == "/where/0/op")
                // Members: the service adds bob, who then pulls the space; a scoped token creates no space.
                let added = try await api.json("PUT", "/v1/service/spaces/\(kitchen)/members/\(bob.user)", token: token, ["role": "editor"])
                #expect(added.status == 200, "\(added.text)")
                #expect(try await api.pullAll(bob.token, limit: 100, space: kitchen).changes.count == 23)
                let notService = try await api.json("PUT", "/v1/service/spaces/\(kitchen)/members/\(bob.user)", token: token, ["role": "service"])
                #expect(notService.status == 422)
                let create = try await api.json("POST", "/v1/service/spaces", token: token, ["name": "New", "owner": bob.user])
                #expect(create.status == 403)

                // A read-only token reads and writes nothing.
                let (_, reader) = try await Self.createToken(api, name: "reporting", spaces: nil, readOnly: true)
                #expect(try await api.json("POST", "/v1/service/spaces/\(attic)/query", token: reader, ["collection": "recipes"]).status == 200)
                #expect(try await api.json("POST", "/v1/service/spaces/\(attic)/push", token: reader, ["ops": recipes]).status == 403)
                #expect(try await api.json("POST", "/v1/service/spaces", token: reader, ["name": "x", "owner": bob.user]).status == 403)

                // A service token is no user's, and a user's token is no service's.
                #expect(try await api.request("GET", "/v1/sync/pull", token: token).status == 403)
                #expect(try await api.request("GET", "/v1/spaces", token: token).status == 403)
                #expect(try await api.json("POST", "/v1/service/spaces/\(kitchen)/query", token: alice.token, ["collection": "recipes"]).status == 403)
                #expect(try await api.json("POST", "/v1/service/spaces/\(kitchen)/query", token: nil, ["collection": "recipes"]).status == 401)
                let fanout = try #require(stack.fanoutPorts.first)
                let stream = try await APIClient(base: "http://127.0.0.1:\(fanout)").request("GET", "/v1/stream?device_id=\(alice.device)", token: token)
                #expect(stream.status == 403)

                // Every use is in the audit log; a revoked token is refused at once.
                let audit = try await api.request("GET", "/v1/admin/audit?limit=200", token: await Self.admin()).json
                let uses = (audit["items"] as? [[String: Any]] ?? []).filter { $0["actor"] as? String == "service:\(tokenID)" }
                #expect(uses.count >= 8)
                #expect(try await api.request("DELETE", "/v1/admin/service-tokens/\(tokenID)", token: await Self.admin()).status == 204)
                let revoked = try await api.json("POST", "/v1/service/spaces/\(kitchen)/query", token: token, ["collection": "recipes"])
                #expect(revoked.status == 401)
            }
        }
    }

    @Test func theRulesJudgeAServiceAsAnOwnerUnlessTheyNameIt() async throws {
        try await OwnDatabase.with { database in
            try await InProcessStack.with(workers: 1, environment: database.environment) { stack in
                let api = stack.client
                let rules = #"{"collections": {"products": {"write": {"delete": ["owner"], "fields": {"price": ["service"]}}}}}"#
                let applied = try await api.request("PUT", "/v1/admin/rules", token: await Self.admin(), body: Data(rules.utf8))
                try #require(applied.status == 200, "\(applied.text)")
                let alice = try await Member.make(api, "alice")
                let shop = try await api.makeSpace(owner: alice, name: "Shop")
                let (_, token) = try await Self.createToken(api, name: "pricing", spaces: [shop])
                // Only the backend sets a price; an owner's op is rejected when it is applied.
                let byOwner = try await api.json("POST", "/v1/sync/push", token: alice.token, [
                    "device_id": alice.device, "space_id": shop,
                    "ops": [["op_id": newOpID(), "type": "upsert", "collection": "products", "id": "p1", "data": ["price": 1]]],
                ])
                let ownerJob = try await api.awaitJob(alice.token, try #require(byOwner.json["job_id"] as? String))
                let refused = (ownerJob["results"] as? [[String: Any]])?.first
                #expect(refused?["status"] as? String == "rejected" && refused?["reason"] as? String == "rule", "\(ownerJob)")
                #expect(refused?["rule"] as? String == "products.fields.price")
                let priced = try await Self.servicePush(api, token, space: shop, [
                    ["op_id": newOpID(), "type": "upsert", "collection": "products", "id": "p1", "data": ["price": 12, "name": "Kettle"]],
                ])
                let results = priced["results"] as? [[String: Any]] ?? []
                #expect(results.first?["status"] as? String == "applied", "\(priced)")
                // A right that does not name the service lets it write as an owner may.
                let deleted = try await Self.servicePush(api, token, space: shop, [
                    ["op_id": newOpID(), "type": "delete", "collection": "products", "id": "p1"],
                ])
                #expect((deleted["results"] as? [[String: Any]])?.first?["status"] as? String == "applied", "\(deleted)")
            }
        }
    }

    /// The batches a receiver took (answered 2xx), by space, in the order they were answered
    /// (`answered`: each request's status and body, recorded as it is answered).
    static func accepted(_ answered: NIOLockedValueBox<[(status: Int, body: [UInt8])]>) -> [String: [[String: Any]]] {
        var batches: [String: [[String: Any]]] = [:]
        for (status, body) in answered.withLockedValue({ $0 }) where (200..<300).contains(status) {
            guard let batch = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
                  let space = batch["space_id"] as? String else { continue }
            batches[space, default: []].append(batch)
        }
        return batches
    }

    @Test func aFeedDeliversEveryChangeInOrderThroughAnOutageOfItsReceiverAndAKilledWorker() async throws {
        let down = NIOLockedValueBox(false)
        let answered = NIOLockedValueBox<[(status: Int, body: [UInt8])]>([])
        let secret = NIOLockedValueBox("")
        let badSignatures = NIOLockedValueBox(0)
        let receiver = try WebhookReceiver { _, body in
            // One space's batches come one at a time: the order they are answered in is theirs.
            let status = down.withLockedValue { $0 } ? 503 : 200
            answered.withLockedValue { $0.append((status, body)) }
            return (status, 0, [])
        }
        defer { receiver.close() }
        try await OwnDatabase.with { database in
            // Attempts enough to outlast the outage without a dead letter.
            let environment = database.environment.merging([
                "ALLOW_PRIVATE_WEBHOOKS": "true", "MAX_ATTEMPTS": "40", "FEED_POLL": "200ms", "FEED_BATCH": "50",
            ]) { $1 }
            try await Stack.with(workers: 2, fanouts: 1, environment: environment) { stack in
                let api = stack.client
                let alice = try await Member.make(api, "alice"), bob = try await Member.make(api, "bob")
                let shared = try await api.makeSpace(owner: alice, with: [(bob, "editor")], name: "Shared")
                let created = try await api.json("POST", "/v1/admin/feeds", token: await Self.admin(), [
                    "url": "http://127.0.0.1:\(receiver.port)/feed", "collections": ["notes", "items"],
                ])
                try #require(created.status == 201, "\(created.text)")
                secret.withLockedValue { $0 = created.json["secret"] as? String ?? "" }
                let feed = try #require((created.json["feed"] as? [String: Any])?["feed_id"] as? String)

                // 2,000 pushes from two devices into the shared space and their personal ones, 8
                // at a time; a third of the way in the receiver goes down for 30 s, and a worker
                // is killed and another started.
                let members = [alice, bob]
                let pushes = 2000
                let next = NIOLockedValueBox(0)
                let jobs = NIOLockedValueBox<[(String, String)]>([])
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for _ in 0..<8 {
                        group.addTask {
                            while true {
                                let index = next.withLockedValue { value -> Int in value += 1; return value - 1 }
                                guard index < pushes else { return }
                                let member = members[index % 2]
                                let space: String? = index % 3 == 0 ? nil : shared
                                let collection = index % 10 == 0 ? "skipped" : (index % 2 == 0 ? "notes" : "items")
                                var ops: [[String: Any]] = [[
                                    "op_id": newOpID(), "type": "upsert", "collection": collection, "id": "k\(index % 150)",
                                    "data": ["n": index, "by": member.user],
                                ]]
                                if index % 7 == 0 {
                                    ops.append(["op_id": newOpID(), "type": "delete", "collection": collection, "id": "k\((index + 3) % 150)"])
                                }
                                var body: [String: Any] = ["device_id": member.device, "ops": ops]
                                if let space { body["space_id"] = space }
                                let pushed = try await api.json("POST", "/v1/sync/push", token: member.token, body)
                                guard pushed.status == 202, let job = pushed.json["job_id"] as? String else {
                                    throw StackError(description: "push answered \(pushed.status): \(pushed.text)")
                                }
                                jobs.withLockedValue { $0.append((member.token, job)) }
                            }
                        }
                    }
                    group.addTask {
                        try await eventually(within: 120, "a third of the pushes") { next.withLockedValue { $0 } > pushes / 3 ? true : nil }
                        down.withLockedValue { $0 = true }
                        stack.workers[0].signal(SIGKILL)
                        try await stack.addWorker()
                        try await Task.sleep(for: .seconds(30))
                        down.withLockedValue { $0 = false }
                    }
                    try await group.waitForAll()
                }
                for (token, job) in jobs.withLockedValue({ $0 }) {
                    let view = try await api.awaitJob(token, job, within: 60)
                    #expect(view["status"] as? String == "succeeded")
                }
                #expect(answered.withLockedValue { $0.contains { $0.status == 503 } }, "the receiver was down while changes waited")

                // Every space's changes, as pulled, arrive in version order, nothing missing:
                // each batch starts where the one before it ended.
                let spaces: [(String, Member)] = [(shared, alice), (try await Self.personalSpace(api, alice), alice),
                                                  (try await Self.personalSpace(api, bob), bob)]
                for (space, member) in spaces {
                    let pulled = try await api.pullAll(member.token, limit: 1000, space: space)
                    let expected = latestState(pulled.changes.filter { ["notes", "items"].contains($0["collection"] as? String ?? "") })
                    try await eventually(within: 60, "the feed reaches \(space)") {
                        let feeds = try await api.request("GET", "/v1/admin/feeds", token: await Self.admin()).json["items"] as? [[String: Any]]
                        let positions = feeds?.first?["positions"] as? [[String: Any]] ?? []
                        let version = positions.first { $0["space_id"] as? String == space }?["version"] as? Int
                        return version.map(String.init) == pulled.cursor ? true : nil
                    }
                    let batches = Self.accepted(answered)[space] ?? []
                    var reached = 0
                    var delivered: [[String: Any]] = []
                    for batch in batches {
                        let from = batch["from_version"] as? Int ?? -1, through = batch["through_version"] as? Int ?? -1
                        // Versions between batches hold nothing the feed carries (other collections,
                        // or changes a later one superseded): nothing of what a pull gives is skipped.
                        let skipped = expected.values.filter { ((reached + 1)...max(reached + 1, from)).contains($0["version"] as? Int ?? 0) && from > reached }
                        #expect(skipped.isEmpty, "a batch from \(from) after \(reached) skipped \(skipped.count) changes")
                        let versions = (batch["changes"] as? [[String: Any]] ?? []).map { $0["version"] as? Int ?? 0 }
                        #expect(versions == versions.sorted() && versions.allSatisfy { $0 > from && $0 <= through })
                        reached = max(reached, through)
                        delivered += batch["changes"] as? [[String: Any]] ?? []
                    }
                    let fed = latestState(delivered)
                    #expect(Set(fed.keys) == Set(expected.keys), "space \(space)")
                    for (key, change) in expected {
                        let got = fed[key]
                        #expect(got?["version"] as? Int == change["version"] as? Int, "\(key)")
                        #expect(got?["deleted"] as? Bool == change["deleted"] as? Bool, "\(key)")
                        if change["deleted"] as? Bool != true {
                            #expect((got?["data"] as? [String: Any])?["n"] as? Int == (change["data"] as? [String: Any])?["n"] as? Int, "\(key)")
                            #expect(got?["changed_by"] as? String == (change["data"] as? [String: Any])?["by"] as? String, "\(key)")
                        }
                    }
                }
                // Every delivery is signed with the feed's secret.
                for request in receiver.requests where !WebhookSignature.isValid(
                    request.headers["syncline-signature"] ?? "", secret: secret.withLockedValue { $0 }, body: request.body) {
                    badSignatures.withLockedValue { $0 += 1 }
                }
                #expect(badSignatures.withLockedValue { $0 } == 0)

                // A replay from a version delivers that space again from there.
                let before = receiver.requests.count
                let replayed = try await api.json("POST", "/v1/admin/feeds/\(feed)/replay", token: await Self.admin(), [
                    "space_id": shared, "from_version": 10,
                ])
                #expect(replayed.status == 200, "\(replayed.text)")
                try await eventually(within: 30, "the replay") {
                    receiver.requests.dropFirst(before).contains { request in
                        let batch = (try? JSONSerialization.jsonObject(with: Data(request.body))) as? [String: Any]
                        return batch?["space_id"] as? String == shared && batch?["from_version"] as? Int == 10
                    } ? true : nil
                }

                // A feed to a private address is refused where webhooks are.
                let privateFeed = Shell.output(
                    "ALLOW_PRIVATE_WEBHOOKS=false DATABASE_URL='\(database.url)' \(E2E.binaries)/syncctl feeds create --url http://10.1.2.3/feed 2>&1")
                #expect(privateFeed.0 != 0)
                #expect(privateFeed.1.contains("private"), "\(privateFeed.1)")
            }
        }
    }

    static func personalSpace(_ api: APIClient, _ member: Member) async throws -> String {
        let spaces = try await api.request("GET", "/v1/spaces", token: member.token).json["items"] as? [[String: Any]] ?? []
        return try #require(spaces.first { $0["personal"] as? Bool == true }?["space_id"] as? String)
    }

    @Test func aDeadReceiverIsDeadLetteredAndReplayedWithoutDelayingAnotherFeed() async throws {
        let dead = NIOLockedValueBox(true)
        let failing = try WebhookReceiver { _, _ in (dead.withLockedValue { $0 } ? 500 : 200, 0, []) }
        let slow = try WebhookReceiver { _, _ in (200, 3, []) }
        let prompt = try WebhookReceiver { _, _ in (200, 0, []) }
        defer { [failing, slow, prompt].forEach { $0.close() } }
        try await OwnDatabase.with { database in
            let environment = database.environment.merging(["ALLOW_PRIVATE_WEBHOOKS": "true", "FEED_POLL": "100ms"]) { $1 }
            try await Stack.with(workers: 1, fanouts: 1, environment: environment) { stack in
                let api = stack.client
                let alice = try await Member.make(api, "alice")
                var feeds: [String] = []
                for receiver in [failing, slow, prompt] {
                    let created = try await api.json("POST", "/v1/admin/feeds", token: await Self.admin(), ["url": "http://127.0.0.1:\(receiver.port)/"])
                    try #require(created.status == 201, "\(created.text)")
                    feeds.append(try #require((created.json["feed"] as? [String: Any])?["feed_id"] as? String))
                }
                // Changes in many spaces at once: the slow receiver holds only its own places.
                for index in 0..<12 {
                    let member = try await Member.make(api, "writer\(index)")
                    let pushed = try await api.push(member.token, device: member.device, ops: [
                        ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": "n\(index)", "data": ["i": index]],
                    ])
                    _ = try await api.awaitJob(member.token, try #require(pushed.json["job_id"] as? String))
                }
                let pushed = try await api.push(alice.token, device: alice.device, ops: [
                    ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": "last", "data": ["a": 1]],
                ])
                _ = try await api.awaitJob(alice.token, try #require(pushed.json["job_id"] as? String))
                let written = Date()
                try await eventually(within: 10, "the prompt feed's last change") {
                    prompt.requests.contains { String(decoding: $0.body, as: UTF8.self).contains(#""id":"last""#) } ? true : nil
                }
                let latency = Date().timeIntervalSince(written)
                print("prompt feed: the last change arrived \(latency) s after it was applied, beside a slow and a dead receiver")
                #expect(latency < 5)

                // The dead receiver's positions stop after MAX_ATTEMPTS, each a dead letter of the feed queue.
                let letters = try await eventually(within: 30, "the feed's dead letters") {
                    let page = try await api.request("GET", "/v1/admin/dead-letters?queue=feed", token: await Self.admin()).json
                    let items = page["items"] as? [[String: Any]] ?? []
                    return items.count >= 13 ? items : nil
                }
                #expect(letters.allSatisfy { $0["queue"] as? String == "feed" && $0["reason"] as? String == "max_attempts" })
                // Back up, and replayed: everything arrives.
                dead.withLockedValue { $0 = false }
                let before = failing.requests.count
                for letter in letters {
                    let id = try #require(letter["job_id"] as? String)
                    let replayed = try await api.request("POST", "/v1/admin/dead-letters/\(id)/replay", token: await Self.admin())
                    #expect(replayed.status == 202, "\(replayed.text)")
                }
                try await eventually(within: 30, "the replayed feed") {
                    failing.requests.dropFirst(before).contains { String(decoding: $0.body, as: UTF8.self).contains(#""id":"last""#) } ? true : nil
                }
                let remaining = try await api.request("GET", "/v1/admin/dead-letters?queue=feed", token: await Self.admin()).json
                #expect((remaining["items"] as? [[String: Any]])?.isEmpty == true)
            }
        }
    }
}

