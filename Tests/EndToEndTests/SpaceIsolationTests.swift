import Foundation
import Testing
import TestSupport

/// Isolation for spaces: every endpoint that names a space, asked by its owner, an editor, a
/// viewer, a removed member and a stranger, answers the documented status — and what a
/// stranger or removed member gets is, byte for byte, what an unknown space's id gets.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct SpaceIsolationTests {
    enum Caller: String, CaseIterable {
        case owner, editor, viewer, removed, stranger
    }

    /// One request about a space, by a caller; `space` is the id to put in it.
    struct Probe {
        let name: String
        /// The documented status per caller.
        let expected: [Caller: Int]
        let send: (_ caller: Member, _ space: String) async throws -> HTTPResult
    }

    @Test func everyEndpointAnswersEachRoleAsDocumented() async throws {
        try await InProcessStack.with(workers: 1, fanouts: 1) { stack in
            let api = stack.client
            let (space, owner, editor, viewer) = try await SpaceTests.family(api)
            let removed = try await Member.make(api, "removed"), stranger = try await Member.make(api, "stranger")
            let target = try await Member.make(api, "target")
            for guest in [removed, target] {
                let code = try #require(try await api.json("POST", "/v1/spaces/\(space)/invitations", token: owner.token, ["role": "editor"]).json["code"] as? String)
                #expect(try await api.request("POST", "/v1/invitations/\(code)/accept", token: guest.token).status == 200)
            }
            let kept = try await SpaceTests.push(api, editor, space: space, [SpaceTests.upsert("kept", ["n": 1])])
            let editorsJob = try #require(kept.json["job_id"] as? String)
            _ = try await api.awaitJob(editor.token, editorsJob)
            #expect(try await api.request("DELETE", "/v1/spaces/\(space)/members/\(removed.user)", token: owner.token).status == 204)
            let callers: [Caller: Member] = [.owner: owner, .editor: editor, .viewer: viewer, .removed: removed, .stranger: stranger]
            let fanoutPort = stack.fanoutPorts[0]

            func members(_ ok: Int) -> [Caller: Int] { [.owner: ok, .editor: ok, .viewer: ok, .removed: 404, .stranger: 404] }
            func ownerOnly(_ ok: Int) -> [Caller: Int] { [.owner: ok, .editor: 403, .viewer: 403, .removed: 404, .stranger: 404] }
            let probes: [Probe] = [
                Probe(name: "pull", expected: members(200)) { caller, id in
                    try await api.request("GET", "/v1/sync/pull?space_id=\(id)", token: caller.token)
                },
                Probe(name: "push", expected: [.owner: 202, .editor: 202, .viewer: 403, .removed: 404, .stranger: 404]) { caller, id in
                    try await SpaceTests.push(api, caller, space: id, [SpaceTests.upsert("by-\(caller.user)", ["n": 1])])
                },
                Probe(name: "members", expected: members(200)) { caller, id in
                    try await api.request("GET", "/v1/spaces/\(id)/members", token: caller.token)
                },
                Probe(name: "change a role", expected: ownerOnly(200)) { caller, id in
                    try await api.json("PATCH", "/v1/spaces/\(id)/members/\(target.user)", token: caller.token, ["role": "editor"])
                },
                Probe(name: "invite", expected: ownerOnly(201)) { caller, id in
                    try await api.json("POST", "/v1/spaces/\(id)/invitations", token: caller.token, ["role": "viewer"])
                },
                Probe(name: "job of the editor", expected: [.owner: 404, .editor: 200, .viewer: 404, .removed: 404, .stranger: 404]) { caller, _ in
                    try await api.request("GET", "/v1/sync/jobs/\(editorsJob)", token: caller.token)
                },
                Probe(name: "stream", expected: members(200)) { caller, id in
                    let stream = try SSEClient(
                        port: fanoutPort, path: "/v1/stream?device_id=\(caller.device)&access_token=\(caller.token)&space_id=\(id)")
                    defer { stream.close() }
                    let status = try await eventually(within: 5, "stream status") { stream.httpStatus != 0 ? stream.httpStatus : nil }
                    return HTTPResult(status: status, headers: [:], body: Data())
                },
                // Destructive ones last, the owner's last of all.
                Probe(name: "remove a member", expected: ownerOnly(204)) { caller, id in
                    try await api.request("DELETE", "/v1/spaces/\(id)/members/\(target.user)", token: caller.token)
                },
                Probe(name: "delete the space", expected: ownerOnly(204)) { caller, id in
                    try await api.request("DELETE", "/v1/spaces/\(id)", token: caller.token)
                },
            ]
            let order: [Caller] = [.stranger, .removed, .viewer, .editor, .owner]
            for probe in probes {
                for caller in order {
                    let member = try #require(callers[caller])
                    let answer = try await probe.send(member, space)
                    #expect(answer.status == probe.expected[caller], "\(probe.name) by the \(caller.rawValue): \(answer.status) \(answer.text)")
                    if answer.status == 404, probe.name != "job of the editor" {
                        let unknown = try await probe.send(member, UUID().uuidString.lowercased())
                        #expect(unknown.status == 404 && unknown.body == answer.body,
                                "\(probe.name) by the \(caller.rawValue): \(answer.text) vs unknown \(unknown.text)")
                    }
                    if probe.name == "members" && caller == .viewer {
                        // Nothing the refused callers tried changed the space.
                        let listed = (answer.json["items"] as? [[String: Any]])?.compactMap { $0["user_id"] as? String }
                        #expect(Set(listed ?? []) == [owner.user, editor.user, viewer.user, target.user])
                    }
                }
                if probe.name == "push" {
                    let pulled = try await api.pullAll(owner.token, space: space).changes.compactMap { $0["id"] as? String }
                    #expect(Set(pulled).isSubset(of: ["kept", "by-\(owner.user)", "by-\(editor.user)"]), "\(pulled)")
                }
            }
            // The space is gone for everyone who was in it.
            for member in [owner, editor, viewer, target] {
                #expect(try await api.request("GET", "/v1/sync/pull?space_id=\(space)", token: member.token).status == 404)
                let listed = try await api.request("GET", "/v1/spaces", token: member.token).json["items"] as? [[String: Any]]
                #expect(listed?.contains { $0["space_id"] as? String == space } == false)
            }
        }
    }
}
