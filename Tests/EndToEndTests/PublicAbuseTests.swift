import Foundation
import Testing

/// Public content against one person trying to game it: counts that cannot be inflated,
/// public ids that cannot be probed in bulk or hoarded, and no name left behind by a
/// deleted account.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct PublicAbuseTests {
    typealias Member = SpaceTests.Member

    static func publish(_ api: APIClient, _ member: Member, space: String? = nil, id: String, publicID: String,
                        data: [String: Any]? = ["title": "Checklist"]) async throws -> [String: Any] {
        var ops: [[String: Any]] = []
        if let data { ops.append(["op_id": newOpID(), "type": "upsert", "collection": "lists", "id": id, "data": data]) }
        ops.append(["op_id": newOpID(), "type": "publish", "collection": "lists", "id": id, "public_id": publicID])
        let pushed = try await SpaceTests.push(api, member, space: space, ops)
        #expect(pushed.status == 202, "\(pushed.text)")
        return try await api.awaitJob(member.token, try #require(pushed.json["job_id"] as? String))
    }

    /// A new user who publishes a list; returns them and its public id.
    static func publishedList(_ api: APIClient, idPrefix: String) async throws -> (author: Member, publicID: String) {
        let author = try await SpaceTests.member(api, "author")
        let publicID = "\(idPrefix)-\(UUID().uuidString.prefix(8).lowercased())"
        _ = try await publish(api, author, id: "list", publicID: publicID)
        return (author, publicID)
    }

    static func fork(_ api: APIClient, _ member: Member, publicID: String) async throws -> String? {
        let pushed = try await SpaceTests.push(api, member, space: nil, [
            ["op_id": newOpID(), "type": "fork", "collection": "lists", "id": "copy-\(UUID().uuidString.prefix(6))", "public_id": publicID],
        ])
        let job = try await api.awaitJob(member.token, try #require(pushed.json["job_id"] as? String, "\(pushed.text)"))
        return ((job["results"] as? [[String: Any]])?.first)?["status"] as? String
    }

    static func forkCount(_ api: APIClient, _ publicID: String) async throws -> Int? {
        let items = try await api.request("GET", "/v1/public?collection=lists&limit=100").json["items"] as? [[String: Any]]
        return items?.first { $0["public_id"] as? String == publicID }?["fork_count"] as? Int
    }

    /// A fork counts once per person: not again after they delete their account and come
    /// back under the same id, and never for forking your own record.
    @Test func forksCountOncePerPersonAndNeverForTheirOwnRecord() async throws {
        try await Stack.with(workers: 1) { stack in
            let api = stack.client
            let (author, publicID) = try await Self.publishedList(api, idPrefix: "fork-count")
            #expect(try await Self.fork(api, author, publicID: publicID) == "applied")
            #expect(try await Self.forkCount(api, publicID) == 0, "forking your own record counted")

            let forker = try await SpaceTests.member(api, "forker")
            #expect(try await Self.fork(api, forker, publicID: publicID) == "applied")
            #expect(try await Self.fork(api, forker, publicID: publicID) == "applied")
            #expect(try await Self.forkCount(api, publicID) == 1)
            #expect(try await api.request("DELETE", "/v1/me", token: forker.token).status == 204)
            let again = Member(user: forker.user, token: forker.token, device: try await api.registerDevice(forker.token))
            #expect(try await Self.fork(api, again, publicID: publicID) == "applied")
            #expect(try await Self.forkCount(api, publicID) == 1, "a deleted and re-created account forked twice")
        }
    }

    /// A view is one reader's first read in an hour: a re-read and a 304 do not count.
    @Test func viewsCountOncePerReaderAndNotFor304s() async throws {
        try await Stack.with(workers: 1) { stack in
            let api = stack.client
            let (_, publicID) = try await Self.publishedList(api, idPrefix: "views")
            let first = try await api.request("GET", "/v1/public/\(publicID)")
            #expect(first.json["view_count"] as? Int == 1)
            let etag = try #require(first.header("ETag"))
            for _ in 0..<5 { _ = try await api.request("GET", "/v1/public/\(publicID)") }
            let cached = try await api.request("GET", "/v1/public/\(publicID)", headers: ["If-None-Match": etag])
            #expect(cached.status == 304)
            let later = try await api.request("GET", "/v1/public/\(publicID)")
            #expect(later.json["view_count"] as? Int == 1, "one reader counted \(later.json["view_count"] ?? "?") views")
        }
    }

    /// What a deleted user published in a shared space stays with the space, under no name.
    @Test func aDeletedAuthorsNameIsGoneFromWhatTheyPublished() async throws {
        try await Stack.with(workers: 1) { stack in
            let api = stack.client
            let owner = try await SpaceTests.member(api, "owner")
            let aliceUser = "alice-\(UUID().uuidString.prefix(6))"
            let aliceToken = await E2E.token(aliceUser, name: "Alice Deleted")
            let alice = Member(user: aliceUser, token: aliceToken, device: try await api.registerDevice(aliceToken))
            let space = try await SpaceAttackTests.space(api, owner: owner, with: [(alice, "editor")])
            let publicID = "named-\(UUID().uuidString.prefix(8).lowercased())"
            _ = try await Self.publish(api, alice, space: space, id: "guide", publicID: publicID)
            #expect(try await api.request("GET", "/v1/public/\(publicID)").json["author"] as? String == "Alice Deleted")

            #expect(try await api.request("DELETE", "/v1/me", token: alice.token).status == 204)
            let read = try await api.request("GET", "/v1/public/\(publicID)")
            #expect(read.status == 200, "the space keeps what she published")
            #expect(read.json["author"] is NSNull, "\(read.text)")
            let listing = try await api.request("GET", "/v1/public?collection=lists&limit=100")
            #expect(!listing.text.contains("Alice Deleted") && !read.text.contains("Alice"))
        }
    }

    /// Publish and fork ops cost tokens of a per-user budget (a push over it gets 429 and
    /// creates no job), and an id held by a publish without data is released by purge.
    @Test func publicIDsCannotBeProbedInBulkNorHoarded() async throws {
        try await Stack.with(workers: 1, environment: ["RATE_LIMIT_PUBLIC_IDS": "1/m,burst=5"]) { stack in
            let api = stack.client
            let prober = try await SpaceTests.member(api, "prober")
            let guesses = (0..<6).map {
                ["op_id": newOpID(), "type": "fork", "collection": "lists", "id": "g\($0)", "public_id": "guess-\($0)-x"] as [String: Any]
            }
            #expect(try await SpaceTests.push(api, prober, space: nil, Array(guesses.prefix(5))).status == 202)
            let refused = try await SpaceTests.push(api, prober, space: nil, Array(guesses.suffix(1)))
            #expect(refused.status == 429 && refused.json["code"] as? String == "rate_limited", "\(refused.status) \(refused.text)")
            #expect(Int(refused.header("Retry-After") ?? "") ?? 0 >= 1)
            // Other users have budgets of their own.
            let other = try await SpaceTests.member(api, "other")
            #expect(try await SpaceTests.push(api, other, space: nil, Array(guesses.suffix(1))).status == 202)

            // A publish without data holds its id until purge releases it.
            let hoarder = try await SpaceTests.member(api, "hoarder"), author = try await SpaceTests.member(api, "author")
            let publicID = "hoarded-\(UUID().uuidString.prefix(8).lowercased())"
            _ = try await Self.publish(api, hoarder, id: "nothing", publicID: publicID, data: nil)
            let taken = try await Self.publish(api, author, id: "real", publicID: publicID)
            #expect((taken["results"] as? [[String: Any]])?.last?["reason"] as? String == "public_id_taken")
            try await Task.sleep(for: .milliseconds(1500))
            let status = E2E.shell("PUBLIC_ID_RESERVATION=1s \(E2E.binaries)/purge --once > /dev/null 2>&1")
            #expect(status == 0)
            let released = try await Self.publish(api, author, id: "real", publicID: publicID)
            #expect((released["results"] as? [[String: Any]])?.last?["status"] as? String == "applied", "\(released)")
            #expect(try await api.request("GET", "/v1/public/\(publicID)").status == 200)
        }
    }
}
