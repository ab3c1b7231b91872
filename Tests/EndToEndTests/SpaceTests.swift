import Foundation
import PQBridge
import Testing
import TestSupport

/// Shared spaces (isolation): members and roles, invitations, and the space as the unit
/// of data, counter and cursor.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct SpaceTests {
    static func push(_ api: APIClient, _ member: Member, space: String?, _ ops: [[String: Any]]) async throws -> HTTPResult {
        var body: [String: Any] = ["device_id": member.device, "ops": ops]
        if let space { body["space_id"] = space }
        return try await api.json("POST", "/v1/sync/push", token: member.token, body)
    }

    static func upsert(_ id: String, _ data: [String: Any]) -> [String: Any] {
        ["op_id": newOpID(), "type": "upsert", "collection": "lists", "id": id, "data": data]
    }

    /// A family: the owner makes a space and invites an editor and a viewer.
    static func family(_ api: APIClient) async throws -> (space: String, owner: Member, editor: Member, viewer: Member) {
        let owner = try await Member.make(api, "owner"), editor = try await Member.make(api, "editor"), viewer = try await Member.make(api, "viewer")
        let created = try await api.json("POST", "/v1/spaces", token: owner.token, ["name": "Family"])
        #expect(created.status == 201, "\(created.text)")
        #expect(created.json["role"] as? String == "owner" && created.json["personal"] as? Bool == false)
        let space = try #require(created.json["space_id"] as? String)
        for (guest, role) in [(editor, "editor"), (viewer, "viewer")] {
            let invitation = try await api.json("POST", "/v1/spaces/\(space)/invitations", token: owner.token, ["role": role])
            #expect(invitation.status == 201, "\(invitation.text)")
            let code = try #require(invitation.json["code"] as? String)
            let joined = try await api.request("POST", "/v1/invitations/\(code)/accept", token: guest.token)
            #expect(joined.status == 200 && joined.json["space_id"] as? String == space && joined.json["role"] as? String == role)
            #expect(try await api.request("POST", "/v1/invitations/\(code)/accept", token: guest.token).status == 404, "single use")
        }
        return (space, owner, editor, viewer)
    }

    @Test func membersShareASpaceAndEveryoneElseSeesNothing() async throws {
        try await InProcessStack.with(workers: 2) { stack in
            let api = stack.client
            let (space, owner, editor, viewer) = try await Self.family(api)
            let stranger = try await Member.make(api, "stranger")

            let listed = try await api.request("GET", "/v1/spaces", token: editor.token).json["items"] as? [[String: Any]]
            #expect(listed?.first?["personal"] as? Bool == true, "the personal space comes first")
            #expect(listed?.contains { $0["space_id"] as? String == space && $0["role"] as? String == "editor" } == true)

            let pushed = try await Self.push(api, editor, space: space, [Self.upsert("shopping", ["milk": true])])
            #expect(pushed.status == 202, "\(pushed.text)")
            _ = try await api.awaitJob(editor.token, try #require(pushed.json["job_id"] as? String))
            for reader in [owner, editor, viewer] {
                let page = try await api.request("GET", "/v1/sync/pull?space_id=\(space)", token: reader.token)
                #expect(page.status == 200)
                #expect((page.json["changes"] as? [[String: Any]])?.map { $0["id"] as? String } == ["shopping"])
            }
            // Nothing leaks into anyone's personal space.
            #expect(try await api.pullAll(editor.token).changes.isEmpty)

            // A viewer may not push; a stranger gets 404 everywhere, as for an unknown space.
            #expect(try await Self.push(api, viewer, space: space, [Self.upsert("x", ["a": 1])]).status == 403)
            let unknown = UUID().uuidString.lowercased()
            for id in [space, unknown] {
                #expect(try await Self.push(api, stranger, space: id, [Self.upsert("x", ["a": 1])]).status == 404)
                #expect(try await api.request("GET", "/v1/sync/pull?space_id=\(id)", token: stranger.token).status == 404)
                #expect(try await api.request("GET", "/v1/spaces/\(id)/members", token: stranger.token).status == 404)
                #expect(try await api.request("DELETE", "/v1/spaces/\(id)", token: stranger.token).status == 404)
                #expect(try await api.json("POST", "/v1/spaces/\(id)/invitations", token: stranger.token, ["role": "owner"]).status == 404)
            }
            // Only the owner manages the space.
            #expect(try await api.json("POST", "/v1/spaces/\(space)/invitations", token: editor.token, ["role": "editor"]).status == 403)
            #expect(try await api.request("DELETE", "/v1/spaces/\(space)", token: editor.token).status == 403)
            #expect(try await api.json("PATCH", "/v1/spaces/\(space)/members/\(viewer.user)", token: editor.token, ["role": "owner"]).status == 403)
            let members = try await api.request("GET", "/v1/spaces/\(space)/members", token: viewer.token).json["items"] as? [[String: Any]]
            #expect(Set(members?.compactMap { $0["user_id"] as? String } ?? []) == [owner.user, editor.user, viewer.user])
            // The last owner cannot leave; a member can.
            #expect(try await api.request("DELETE", "/v1/spaces/\(space)/members/\(owner.user)", token: owner.token).status == 409)
            #expect(try await api.request("DELETE", "/v1/spaces/\(space)/members/\(viewer.user)", token: viewer.token).status == 204)
            #expect(try await api.request("GET", "/v1/sync/pull?space_id=\(space)", token: viewer.token).status == 404)
            // Deleted by its owner: gone for everyone.
            #expect(try await api.request("DELETE", "/v1/spaces/\(space)", token: owner.token).status == 204)
            #expect(try await api.request("GET", "/v1/sync/pull?space_id=\(space)", token: editor.token).status == 404)
        }
    }

    /// A push to a shared space pokes every other member's streams with the space's id;
    /// a member removed stops getting them at once.
    @Test func membersArePokedAndARemovedMemberIsNot() async throws {
        try await InProcessStack.with(workers: 1, fanouts: 1) { stack in
            let api = stack.client
            let (space, owner, editor, viewer) = try await Self.family(api)
            let port = stack.fanoutPorts[0]
            let editorStream = try SSEClient(port: port, path: "/v1/stream?device_id=\(editor.device)&access_token=\(editor.token)")
            let viewerStream = try SSEClient(port: port, path: "/v1/stream?device_id=\(viewer.device)&access_token=\(viewer.token)")
            defer { editorStream.close(); viewerStream.close() }
            _ = try await editorStream.inbox.next("hello")
            _ = try await viewerStream.inbox.next("hello")

            let pushed = try await Self.push(api, owner, space: space, [Self.upsert("list", ["eggs": 12])])
            let job = try await api.awaitJob(owner.token, try #require(pushed.json["job_id"] as? String))
            for stream in [editorStream, viewerStream] {
                let poke = try await stream.inbox.next("poke", within: 3).message
                #expect(poke["space_id"] as? String == space)
                #expect(poke["cursor"] as? String == job["checkpoint"] as? String)
            }

            #expect(try await api.request("DELETE", "/v1/spaces/\(space)/members/\(viewer.user)", token: owner.token).status == 204)
            let again = try await Self.push(api, owner, space: space, [Self.upsert("list", ["eggs": 6])])
            _ = try await api.awaitJob(owner.token, try #require(again.json["job_id"] as? String))
            _ = try await editorStream.inbox.next("poke", after: 1, within: 3)
            try await Task.sleep(for: .milliseconds(500))
            #expect(viewerStream.inbox.of(type: "poke").count == 1, "no poke after removal")
        }
    }

    /// A stream narrowed by `space_id` hears that space alone and ends when its user leaves
    /// it; a stream of every space says in `hello` where each space stands.
    @Test func aStreamNarrowedToASpaceHearsItAloneAndEndsWithTheMembership() async throws {
        try await InProcessStack.with(workers: 1, fanouts: 1) { stack in
            let api = stack.client
            let (space, owner, editor, _) = try await Self.family(api)
            let stranger = try await Member.make(api, "stranger")
            let port = stack.fanoutPorts[0]
            let pushed = try await Self.push(api, owner, space: space, [Self.upsert("before", ["n": 1])])
            let first = try await api.awaitJob(owner.token, try #require(pushed.json["job_id"] as? String))
            let personal = try #require((try await api.request("GET", "/v1/spaces", token: editor.token).json["items"] as? [[String: Any]])?
                .first { $0["personal"] as? Bool == true }?["space_id"] as? String)

            let base = "/v1/stream?device_id=\(editor.device)&access_token=\(editor.token)"
            let everything = try SSEClient(port: port, path: base)
            let narrowed = try SSEClient(port: port, path: base + "&space_id=\(space)")
            defer { everything.close(); narrowed.close() }
            let hello = try await everything.inbox.next("hello").message
            #expect(hello["space_id"] as? String == personal && hello["cursor"] as? String == "0")
            #expect(hello["spaces"] as? [String: String] == [personal: "0", space: first["checkpoint"] as! String])
            let narrowedHello = try await narrowed.inbox.next("hello").message
            #expect(narrowedHello["space_id"] as? String == space && narrowedHello["cursor"] as? String == first["checkpoint"] as? String)
            #expect(narrowedHello["spaces"] as? [String: String] == [space: first["checkpoint"] as! String])

            // A change to the editor's personal space from another device of theirs: only the
            // stream of every space hears it.
            let phone = try await api.registerDevice(editor.token)
            let own = try await api.json("POST", "/v1/sync/push", token: editor.token, ["device_id": phone, "ops": [Self.upsert("mine", ["a": 1])]])
            _ = try await api.awaitJob(editor.token, try #require(own.json["job_id"] as? String))
            let personalPoke = try await everything.inbox.next("poke", within: 3).message
            #expect(personalPoke["space_id"] as? String == personal)
            let shared = try await Self.push(api, owner, space: space, [Self.upsert("after", ["n": 2])])
            _ = try await api.awaitJob(owner.token, try #require(shared.json["job_id"] as? String))
            #expect(try await narrowed.inbox.next("poke", within: 3).message["space_id"] as? String == space)
            #expect(try await everything.inbox.next("poke", after: 1, within: 3).message["space_id"] as? String == space)
            #expect(narrowed.inbox.of(type: "poke").count == 1, "the personal space's poke is not this stream's")

            // Removed: the narrowed stream ends at once; the other stream stays open.
            #expect(try await api.request("DELETE", "/v1/spaces/\(space)/members/\(editor.user)", token: owner.token).status == 204)
            let deadline = Date().addingTimeInterval(3)
            while !narrowed.inbox.finished && Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
            #expect(narrowed.inbox.finished, "the stream of a space the user left ends")
            #expect(!everything.inbox.finished)

            // Refused: a space the caller is not in (as an unknown one), and a malformed id.
            for (id, status) in [(space, 404), (UUID().uuidString, 404), ("nope", 400)] {
                let refused = try SSEClient(port: port, path: "/v1/stream?device_id=\(stranger.device)&access_token=\(stranger.token)&space_id=\(id)")
                defer { refused.close() }
                let until = Date().addingTimeInterval(3)
                while refused.httpStatus == 0 && Date() < until { try await Task.sleep(for: .milliseconds(20)) }
                #expect(refused.httpStatus == status, "space_id=\(id)")
            }
        }
    }

    @Test func aMemberRemovedWhileTheirPushWaitsGetsEveryOpRejected() async throws {
        try await Stack.with(workers: 0) { stack in
            let api = stack.client
            let (space, owner, editor, _) = try await Self.family(api)
            let pushed = try await Self.push(api, editor, space: space, [Self.upsert("late", ["x": 1]), Self.upsert("later", ["y": 2])])
            #expect(pushed.status == 202)
            #expect(try await api.request("DELETE", "/v1/spaces/\(space)/members/\(editor.user)", token: owner.token).status == 204)
            try await stack.addWorker()
            let job = try await api.awaitJob(editor.token, try #require(pushed.json["job_id"] as? String))
            let results = job["results"] as? [[String: Any]] ?? []
            #expect(results.map { $0["status"] as? String } == ["rejected", "rejected"])
            #expect(results.allSatisfy { $0["reason"] as? String == "forbidden" })
            let page = try await api.request("GET", "/v1/sync/pull?space_id=\(space)", token: owner.token)
            #expect((page.json["changes"] as? [Any])?.isEmpty == true, "nothing of theirs lands")
        }
    }

    /// Account deletion: the last owner's shared space passes to the longest-standing
    /// editor with its records; a space with no other member goes.
    @Test func deletingTheOwnersAccountPassesTheSpaceOn() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let (space, owner, editor, viewer) = try await Self.family(api)
            let alone = try #require(try await api.json("POST", "/v1/spaces", token: owner.token, ["name": "Solo"]).json["space_id"] as? String)
            let pushed = try await Self.push(api, owner, space: space, [Self.upsert("kept", ["a": 1])])
            _ = try await api.awaitJob(owner.token, try #require(pushed.json["job_id"] as? String))
            let deleted = try await api.request("DELETE", "/v1/me", token: owner.token)
            #expect(deleted.status == 204, "\(deleted.text)")
            let members = try await api.request("GET", "/v1/spaces/\(space)/members", token: editor.token).json["items"] as? [[String: Any]]
            #expect(members?.first { $0["user_id"] as? String == editor.user }?["role"] as? String == "owner")
            #expect(members?.first { $0["user_id"] as? String == viewer.user }?["role"] as? String == "viewer")
            #expect(members?.contains { $0["user_id"] as? String == owner.user } == false)
            let page = try await api.request("GET", "/v1/sync/pull?space_id=\(space)", token: viewer.token)
            #expect((page.json["changes"] as? [[String: Any]])?.map { $0["id"] as? String } == ["kept"], "records stay with the space")
            let pool = PGPool(url: E2E.databaseURL!, size: 1, logger: E2E.logger)
            let left = try await pool.value("SELECT count(*) FROM spaces WHERE space_id = \(alone)::uuid")
            await pool.shutdown()
            #expect(left == 0, "a space with no other member goes")
        }
    }

    /// No missed changes per space: two spaces committing concurrently; a member pulling each from its
    /// own cursor while writes land sees every record.
    @Test func noChangeIsMissedPerSpaceWhileTwoSpacesCommitAtOnce() async throws {
        try await InProcessStack.with(workers: 3) { stack in
            let api = stack.client
            let (first, owner, editor, _) = try await Self.family(api)
            let second = try #require(try await api.json("POST", "/v1/spaces", token: owner.token, ["name": "Crew"]).json["space_id"] as? String)
            var expected: [String: Set<String>] = [first: [], second: []]
            var jobs: [String] = []
            for round in 0..<20 {
                for (space, writer) in [(first, editor), (second, owner)] {
                    let id = "r\(round)"
                    let pushed = try await Self.push(api, writer, space: space, [Self.upsert(id, ["round": round])])
                    jobs.append(try #require(pushed.json["job_id"] as? String))
                    expected[space]?.insert(id)
                }
            }
            var seen: [String: Set<String>] = [first: [], second: []]
            var cursors: [String: String] = [:]
            let deadline = Date().addingTimeInterval(30)
            while seen != expected && Date() < deadline {
                for space in [first, second] {
                    let page = try await api.request(
                        "GET", "/v1/sync/pull?space_id=\(space)&limit=3" + (cursors[space].map { "&since=\($0)" } ?? ""), token: owner.token)
                    for change in page.json["changes"] as? [[String: Any]] ?? [] { seen[space]?.insert(change["id"] as! String) }
                    cursors[space] = page.json["cursor"] as? String
                }
            }
            #expect(seen == expected)
        }
    }
}
