import Foundation
import Testing
import TestSupport

/// The sailing app's sharing flow: publish with metadata, discover by tag and
/// by search, read, fork (queued offline like any op), unlisted links, and no phantoms.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct DiscoverAndForkTests {
    struct Sailor {
        let token: String
        let device: String
    }

    static func sailor(_ api: APIClient, _ name: String, devices: Int = 1) async throws -> [Sailor] {
        let token = await E2E.token("\(name)-\(UUID().uuidString.prefix(6))", name: name)
        var sailors: [Sailor] = []
        for index in 0..<devices {
            sailors.append(Sailor(token: token, device: try await api.registerDevice(token, name: "\(name) \(index)")))
        }
        return sailors
    }

    /// A word no other test uses, for searches and tags.
    static func word() -> String { "w" + UUID().uuidString.prefix(10).lowercased().replacingOccurrences(of: "-", with: "") }

    static func hlc(_ device: String, offset: Int64 = 0) -> String {
        let ms = Int64(Date().timeIntervalSince1970 * 1000) + offset
        return "\(ms)-00000-\(device)"
    }

    static func applied(_ api: APIClient, _ sailor: Sailor, _ ops: [[String: Any]]) async throws -> [[String: Any]] {
        let push = try await api.push(sailor.token, device: sailor.device, ops: ops)
        #expect(push.status == 202, "\(push.text)")
        let job = try await api.awaitJob(sailor.token, try #require(push.json["job_id"] as? String))
        #expect(job["status"] as? String == "succeeded")
        return job["results"] as? [[String: Any]] ?? []
    }

    static func items(_ api: APIClient, _ query: String) async throws -> [[String: Any]] {
        let listing = try await api.request("GET", "/v1/public?" + query)
        #expect(listing.status == 200, "\(query): \(listing.text)")
        return listing.json["items"] as? [[String: Any]] ?? []
    }

    @Test func publishDiscoverForkAndSeeTheBadgeOnEveryDevice() async throws {
        try await InProcessStack.with(workers: 2) { stack in
            let api = stack.client
            let alice = try await Self.sailor(api, "Alice", devices: 2)
            let bob = try await Self.sailor(api, "Bob")[0]
            let tag = Self.word(), word = Self.word()
            let publicID = "pre-charter-\(UUID().uuidString.prefix(8).lowercased())"

            let published = try await Self.applied(api, alice[0], [
                ["op_id": newOpID(), "type": "upsert", "collection": "checklists", "id": "c1",
                 "data": ["title": "Pre-charter safety", "description": "Before casting off: \(word) and flares",
                          "tags": ["safety", tag], "language": "en", "items": ["life jackets", "flares"]]],
                ["op_id": newOpID(), "type": "publish", "collection": "checklists", "id": "c1", "public_id": publicID],
            ])
            #expect(published.map { $0["status"] as? String } == ["applied", "applied"])

            // Bob discovers it by tag and by a word of its description.
            for query in ["tag=\(tag)", "q=\(word)", "q=\(word)+flares&tag=\(tag)", "q=%22casting+off%22&tag=\(tag)"] {
                let found = try await Self.items(api, query)
                #expect(found.map { $0["public_id"] as? String } == [publicID], "\(query)")
                if let item = found.first {
                    #expect(item["description"] as? String == "Before casting off: \(word) and flares")
                    #expect(item["tags"] as? [String] == ["safety", tag])
                    #expect(item["language"] as? String == "en")
                    #expect(item["fork_count"] as? Int == 0)
                }
            }
            #expect(try await Self.items(api, "tag=\(tag)-other").isEmpty)
            #expect(try await Self.items(api, "q=\(word)+-flares").isEmpty, "websearch syntax: -word excludes")
            let read = try await api.request("GET", "/v1/public/\(publicID)")
            #expect(read.json["can_fork"] as? Bool == true, "can_fork defaults to true")
            #expect(read.json["fork_count"] as? Int == 0)
            #expect(read.json.keys.contains("forked_from") && read.json["forked_from"] is NSNull)

            // Bob forks it from an offline queue: a local edit and the fork, one push.
            let forked = try await Self.applied(api, bob, [
                ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": "n1", "data": ["text": "fork that list"],
                 "hlc": Self.hlc(bob.device, offset: -60_000)],
                ["op_id": newOpID(), "type": "fork", "collection": "checklists", "id": "my-copy", "public_id": publicID,
                 "hlc": Self.hlc(bob.device, offset: -59_000)],
            ])
            #expect(forked.map { $0["status"] as? String } == ["applied", "applied"])
            let copy = latestState(try await api.pullAll(bob.token).changes)["checklists/my-copy"]
            #expect(copy?["forked_from"] as? String == publicID)
            #expect(copy?["visibility"] as? String == "private")
            #expect(copy?["public_id"] is NSNull)
            #expect((copy?["data"] as? [String: Any])?["title"] as? String == "Pre-charter safety")
            #expect((copy?["hlc"] as? String)?.hasSuffix(bob.device) == true)
            #expect(try await api.request("GET", "/v1/public/\(publicID)").json["fork_count"] as? Int == 1)

            // A second fork by Bob copies again but does not count again.
            let again = try await Self.applied(api, bob, [
                ["op_id": newOpID(), "type": "fork", "collection": "checklists", "id": "second-copy", "public_id": publicID],
            ])
            #expect(again.first?["status"] as? String == "applied")
            #expect(try await api.request("GET", "/v1/public/\(publicID)").json["fork_count"] as? Int == 1)
            #expect(try await Self.items(api, "tag=\(tag)").first?["fork_count"] as? Int == 1)

            // Alice's second device sees the badge.
            let onSecond = latestState(try await api.pullAll(alice[1].token).changes)["checklists/c1"]
            #expect(onSecond?["visibility"] as? String == "public")
            #expect(onSecond?["public_id"] as? String == publicID)
            #expect(onSecond?["can_fork"] as? Bool == true)
            #expect(onSecond?["published_at"] as? String != nil)
            #expect(onSecond?["forked_from"] is NSNull)
            #expect((onSecond?["hlc"] as? String)?.isEmpty == false)

            // Unpublished: gone from the list and the search; forking it now finds nothing.
            _ = try await Self.applied(api, alice[1], [
                ["op_id": newOpID(), "type": "unpublish", "collection": "checklists", "id": "c1"],
            ])
            #expect(try await Self.items(api, "tag=\(tag)").isEmpty)
            #expect(try await Self.items(api, "q=\(word)").isEmpty)
            let late = try await Self.applied(api, bob, [
                ["op_id": newOpID(), "type": "fork", "collection": "checklists", "id": "third-copy", "public_id": publicID],
            ])
            #expect(late.first?["status"] as? String == "rejected")
            #expect(late.first?["reason"] as? String == "not_found")
        }
    }

    @Test func unlistedIsReadableByIDButNeverListedOrFound() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let alice = try await Self.sailor(api, "Alice")[0]
            let word = Self.word()
            let publicID = "by-link-\(UUID().uuidString.prefix(8).lowercased())"
            _ = try await Self.applied(api, alice, [
                ["op_id": newOpID(), "type": "upsert", "collection": "guides", "id": "g1",
                 "data": ["title": "Secret anchorage \(word)", "tags": [word]]],
                ["op_id": newOpID(), "type": "publish", "collection": "guides", "id": "g1", "public_id": publicID, "listed": false],
            ])
            let read = try await api.request("GET", "/v1/public/\(publicID)")
            #expect(read.status == 200)
            #expect(try await Self.items(api, "tag=\(word)").isEmpty)
            #expect(try await Self.items(api, "q=\(word)").isEmpty)
            #expect(try await Self.items(api, "collection=guides&limit=100").allSatisfy { $0["public_id"] as? String != publicID })
            let change = latestState(try await api.pullAll(alice.token).changes)["guides/g1"]
            #expect(change?["visibility"] as? String == "unlisted")
            #expect(change?["public_id"] as? String == publicID)

            // Last writer wins on `listed`: listed again, it appears.
            _ = try await Self.applied(api, alice, [
                ["op_id": newOpID(), "type": "publish", "collection": "guides", "id": "g1", "public_id": publicID],
            ])
            #expect(try await Self.items(api, "tag=\(word)").map { $0["public_id"] as? String } == [publicID])
        }
    }

    @Test func forksOfLockedOrUnknownRecordsAreRejected() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let alice = try await Self.sailor(api, "Alice")[0]
            let bob = try await Self.sailor(api, "Bob")[0]
            let locked = "locked-\(UUID().uuidString.prefix(8).lowercased())"
            _ = try await Self.applied(api, alice, [
                ["op_id": newOpID(), "type": "upsert", "collection": "guides", "id": "g1", "data": ["title": "Mine only"]],
                ["op_id": newOpID(), "type": "publish", "collection": "guides", "id": "g1", "public_id": locked, "can_fork": false],
            ])
            let results = try await Self.applied(api, bob, [
                ["op_id": newOpID(), "type": "fork", "collection": "guides", "id": "a", "public_id": locked],
                ["op_id": newOpID(), "type": "fork", "collection": "guides", "id": "b", "public_id": "no-such-\(Self.word())"],
            ])
            #expect(results.map { $0["status"] as? String } == ["rejected", "rejected"])
            #expect(results.map { $0["reason"] as? String } == ["not_forkable", "not_found"])
            #expect(try await api.pullAll(bob.token).changes.isEmpty)
            #expect(try await api.request("GET", "/v1/public/\(locked)").json["fork_count"] as? Int == 0)
        }
    }

    /// A publish of a record with no data creates nothing anyone sees; a publish applied
    /// before the record's creation (pushed first, later HLC) ends public once it exists.
    @Test func aPublishBeforeTheDataIsNeverAPhantom() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let alice = try await Self.sailor(api, "Alice", devices: 2)
            let ghost = "ghost-\(UUID().uuidString.prefix(8).lowercased())"
            let early = "early-\(UUID().uuidString.prefix(8).lowercased())"
            let results = try await Self.applied(api, alice[0], [
                ["op_id": newOpID(), "type": "publish", "collection": "guides", "id": "never-written", "public_id": ghost],
                ["op_id": newOpID(), "type": "unpublish", "collection": "guides", "id": "also-never-written"],
                ["op_id": newOpID(), "type": "publish", "collection": "guides", "id": "g1", "public_id": early,
                 "hlc": Self.hlc(alice[0].device, offset: -1_000)],
            ])
            #expect(results.allSatisfy { $0["status"] as? String != "rejected" })
            #expect(try await api.pullAll(alice[1].token).changes.isEmpty, "nothing appears in any pull")
            #expect(try await api.request("GET", "/v1/public/\(ghost)").status == 404)
            #expect(try await api.request("GET", "/v1/public/\(early)").status == 404)

            // The creation, older by the clock, arrives afterwards: the newer publish applies.
            _ = try await Self.applied(api, alice[0], [
                ["op_id": newOpID(), "type": "upsert", "collection": "guides", "id": "g1", "data": ["title": "Now it exists"],
                 "hlc": Self.hlc(alice[0].device, offset: -2_000)],
            ])
            let changes = latestState(try await api.pullAll(alice[1].token).changes)
            #expect(Set(changes.keys) == ["guides/g1"])
            #expect(changes["guides/g1"]?["visibility"] as? String == "public")
            #expect(try await api.request("GET", "/v1/public/\(early)").status == 200)
        }
    }

    /// Metadata of the wrong type shows as null or []; tags and words too long for an index
    /// entry never fail the job that publishes them (they are shown, not indexed).
    @Test func oddlyShapedMetadataNeverFailsAJob() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let alice = try await Self.sailor(api, "Alice")[0]
            let word = Self.word(), longTag = String(repeating: "x", count: 3_000)
            let longWord = String(repeating: "y", count: 5_000)
            let odd = "odd-\(UUID().uuidString.prefix(8).lowercased())", long = "long-\(UUID().uuidString.prefix(8).lowercased())"
            let results = try await Self.applied(api, alice, [
                ["op_id": newOpID(), "type": "upsert", "collection": "guides", "id": "odd",
                 "data": ["title": 42, "description": ["not", "text"], "tags": [word, 7], "language": NSNull()]],
                ["op_id": newOpID(), "type": "publish", "collection": "guides", "id": "odd", "public_id": odd],
                ["op_id": newOpID(), "type": "upsert", "collection": "guides", "id": "long",
                 "data": ["title": "Long \(word)", "description": longWord + " " + String(repeating: "z ", count: 20_000),
                          "tags": [longTag, word, word]]],
                ["op_id": newOpID(), "type": "publish", "collection": "guides", "id": "long", "public_id": long],
            ])
            #expect(results.map { $0["status"] as? String } == ["applied", "applied", "applied", "applied"])
            let byTag = try await Self.items(api, "tag=\(word)")
            #expect(byTag.map { $0["public_id"] as? String } == [long], "a mixed tags array has no tags")
            #expect(byTag.first?["tags"] as? [String] == [longTag, word, word], "tags are shown as written")
            let byWord = try await Self.items(api, "q=\(word)")
            #expect(byWord.map { $0["public_id"] as? String } == [long])
            let oddItem = try await Self.items(api, "collection=guides&limit=100").first { $0["public_id"] as? String == odd }
            #expect(oddItem?["title"] is NSNull && oddItem?["description"] is NSNull && oddItem?["language"] is NSNull)
            #expect(oddItem?["tags"] as? [String] == [])
        }
    }
}
