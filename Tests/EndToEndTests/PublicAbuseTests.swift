import Foundation
import Testing
import TestSupport

/// Public content against one person trying to game it: counts that cannot be inflated,
/// public ids that cannot be probed in bulk or hoarded, and no name left behind by a
/// deleted account.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct PublicAbuseTests {

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
        let author = try await Member.make(api, "author")
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
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let (author, publicID) = try await Self.publishedList(api, idPrefix: "fork-count")
            #expect(try await Self.fork(api, author, publicID: publicID) == "applied")
            #expect(try await Self.forkCount(api, publicID) == 0, "forking your own record counted")

            let forker = try await Member.make(api, "forker")
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
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let (_, publicID) = try await Self.publishedList(api, idPrefix: "views")
            let first = try await api.request("GET", "/v1/public/\(publicID)")
            #expect(first.json["view_count"] as? Int == 1)
            let etag = try #require(first.header("ETag"))
            for _ in 0..<5 { _ = try await api.request("GET", "/v1/public/\(publicID)") }
            let cached = try await api.request("GET", "/v1/public/\(publicID)", headers: ["If-None-Match": etag])
            #expect(cached.status == 304)
            // The count is eventually consistent (a read meeting the gateway's once-a-second
            // flush may show the count of a moment before): it settles at one, and a read
            // after the next flush still finds one — no re-read nor 304 was counted.
            let settled = try await eventually(within: 10, "the one view shows") { () async throws -> Int? in
                let count = try await api.request("GET", "/v1/public/\(publicID)").json["view_count"] as? Int
                return count == 1 ? count : nil
            }
            #expect(settled == 1)
            try await Task.sleep(for: .milliseconds(1_500))
            let later = try await api.request("GET", "/v1/public/\(publicID)")
            #expect(later.json["view_count"] as? Int == 1, "one reader counted \(later.json["view_count"] ?? "?") views")
        }
    }

    /// What a deleted user published in a shared space stays with the space, under no name.
    @Test func aDeletedAuthorsNameIsGoneFromWhatTheyPublished() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let owner = try await Member.make(api, "owner")
            let aliceUser = "alice-\(UUID().uuidString.prefix(6))"
            let aliceToken = await E2E.token(aliceUser, name: "Alice Deleted")
            let alice = Member(user: aliceUser, token: aliceToken, device: try await api.registerDevice(aliceToken))
            let space = try await api.makeSpace(owner: owner, with: [(alice, "editor")])
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

    static func publishUnlisted(_ api: APIClient, _ member: Member, publicID: String) async throws {
        let pushed = try await SpaceTests.push(api, member, space: nil, [
            SpaceTests.upsert("secret", ["title": "Unlisted"]),
            ["op_id": newOpID(), "type": "publish", "collection": "lists", "id": "secret", "public_id": publicID, "listed": false],
        ])
        _ = try await api.awaitJob(member.token, try #require(pushed.json["job_id"] as? String, "\(pushed.text)"))
    }

    /// Publish and fork ops take tokens of a per-user budget one by one: the ops left
    /// without one are rejected `rate_limited` without being looked up, so a guess that
    /// names an existing unlisted record copies nothing.
    @Test func publicIDsCannotBeProbedInBulk() async throws {
        try await InProcessStack.with(workers: 1, environment: ["RATE_LIMIT_PUBLIC_IDS": "1/m,burst=5"]) { stack in
            let api = stack.client
            let owner = try await Member.make(api, "owner")
            let unlisted = "unlisted-\(UUID().uuidString.prefix(8).lowercased())"
            try await Self.publishUnlisted(api, owner, publicID: unlisted)

            let prober = try await Member.make(api, "prober")
            let ids = (0..<5).map { "guess-\($0)-x" } + [unlisted, "guess-6-x"]
            let guesses = ids.enumerated().map {
                ["op_id": newOpID(), "type": "fork", "collection": "lists", "id": "g\($0.offset)", "public_id": $0.element] as [String: Any]
            }
            let pushed = try await SpaceTests.push(api, prober, space: nil, guesses)
            #expect(pushed.status == 202, "\(pushed.text)")
            let job = try await api.awaitJob(prober.token, try #require(pushed.json["job_id"] as? String))
            let reasons = (job["results"] as? [[String: Any]])?.map { $0["reason"] as? String }
            #expect(reasons == Array(repeating: "not_found", count: 5) + ["rate_limited", "rate_limited"], "\(job)")
            #expect(try await api.pullAll(prober.token).changes.isEmpty, "a refused guess copied the unlisted record")
            // Other users have budgets of their own.
            let other = try await Member.make(api, "other")
            #expect(try await Self.fork(api, other, publicID: unlisted) == "applied")
        }
    }

    /// An id held by a publish without data tells another space nothing: their publish
    /// takes it as if it were free. Within its own space it holds until purge releases it.
    @Test func anIDWithoutDataIsFreeToOthersAndReleasedByPurge() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let hoarder = try await Member.make(api, "hoarder"), author = try await Member.make(api, "author")
            let publicID = "hoarded-\(UUID().uuidString.prefix(8).lowercased())"
            _ = try await Self.publish(api, hoarder, id: "nothing", publicID: publicID, data: nil)
            let taken = try await Self.publish(api, author, id: "real", publicID: publicID)
            #expect((taken["results"] as? [[String: Any]])?.last?["status"] as? String == "applied", "\(taken)")
            #expect(try await api.request("GET", "/v1/public/\(publicID)").json["data"] as? [String: String] == ["title": "Checklist"])
            // The hoarder's data arrives later: their record stays private.
            let late = try await SpaceTests.push(api, hoarder, space: nil, [SpaceTests.upsert("nothing", ["title": "Late"])])
            _ = try await api.awaitJob(hoarder.token, try #require(late.json["job_id"] as? String, "\(late.text)"))
            let hoarded = latestState(try await api.pullAll(hoarder.token).changes)["lists/nothing"]
            #expect(hoarded?["data"] as? [String: String] == ["title": "Late"])
            #expect(hoarded?["visibility"] as? String == "private" && hoarded?["public_id"] is NSNull, "\(hoarded ?? [:])")
            #expect(try await api.request("GET", "/v1/public/\(publicID)").json["data"] as? [String: String] == ["title": "Checklist"])

            // Within one space an id without data holds until purge releases it.
            let own = "own-\(publicID)"
            _ = try await Self.publish(api, author, id: "waiting", publicID: own, data: nil)
            let held = try await Self.publish(api, author, id: "second", publicID: own)
            #expect((held["results"] as? [[String: Any]])?.last?["reason"] as? String == "public_id_taken")
            try await Task.sleep(for: .milliseconds(1500))
            let status = Shell.run("PUBLIC_ID_RESERVATION=1s \(E2E.binaries)/purge --once > /dev/null 2>&1")
            #expect(status == 0)
            let released = try await Self.publish(api, author, id: "second", publicID: own)
            #expect((released["results"] as? [[String: Any]])?.last?["status"] as? String == "applied", "\(released)")
            #expect(try await api.request("GET", "/v1/public/\(own)").status == 200)
        }
    }

    /// A fork of another space's unlisted record does not pass its id on to whoever reads
    /// the fork; a fork of a public record names it.
    @Test func aForkNamesOnlyASourceItsReadersCouldRead() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let owner = try await Member.make(api, "owner")
            let unlisted = "unlisted-\(UUID().uuidString.prefix(8).lowercased())"
            try await Self.publishUnlisted(api, owner, publicID: unlisted)
            let (_, listed) = try await Self.publishedList(api, idPrefix: "listed")

            let forker = try await Member.make(api, "forker")
            let pushed = try await SpaceTests.push(api, forker, space: nil, [
                ["op_id": newOpID(), "type": "fork", "collection": "lists", "id": "from-unlisted", "public_id": unlisted],
                ["op_id": newOpID(), "type": "fork", "collection": "lists", "id": "from-listed", "public_id": listed],
                ["op_id": newOpID(), "type": "publish", "collection": "lists", "id": "from-unlisted", "public_id": "fork-\(unlisted)"],
            ])
            let job = try await api.awaitJob(forker.token, try #require(pushed.json["job_id"] as? String, "\(pushed.text)"))
            #expect((job["results"] as? [[String: Any]])?.map { $0["status"] as? String } == ["applied", "applied", "applied"])
            let pulled = latestState(try await api.pullAll(forker.token).changes)
            #expect(pulled["lists/from-unlisted"]?["data"] as? [String: String] == ["title": "Unlisted"])
            #expect(pulled["lists/from-unlisted"]?["forked_from"] is NSNull, "\(pulled["lists/from-unlisted"] ?? [:])")
            #expect(pulled["lists/from-listed"]?["forked_from"] as? String == listed)
            let read = try await api.request("GET", "/v1/public/fork-\(unlisted)")
            #expect(read.status == 200 && read.json["forked_from"] is NSNull && !read.text.contains("\"\(unlisted)\""), "\(read.text)")
        }
    }
}
