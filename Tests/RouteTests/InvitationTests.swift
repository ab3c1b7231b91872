import Foundation
import Testing
import TestSupport

/// Invitations to a space: single use, expiring, unguessable, listed and revoked by owners
/// alone, capped, and living only as long as their creator's authority.
@Suite(.timeLimit(.minutes(2)), .enabled(if: InProcessGateway.enabled, "needs DATABASE_URL and AMQP_URL"))
struct InvitationTests {
    /// A co-owner's codes stop working once they are removed, made a viewer, or delete
    /// their account — even when they try to come back through their own code.
    @Test func anInvitationLivesOnlyAsLongAsItsCreatorsAuthority() async throws {
        try await InProcessGateway.with { api in
            for ending in ["removed", "demoted", "account deleted"] {
                let owner = try await Member.make(api, "owner"), coOwner = try await Member.make(api, "co-owner")
                let newcomer = try await Member.make(api, "newcomer")
                let space = try await api.makeSpace(owner: owner, with: [(coOwner, "owner")])
                let kept = try await api.invite(to: space, by: coOwner, role: "owner")
                let forNewcomer = try await api.invite(to: space, by: coOwner, role: "editor")
                switch ending {
                case "removed":
                    #expect(try await api.request("DELETE", "/v1/spaces/\(space)/members/\(coOwner.user)", token: owner.token).status == 204)
                case "demoted":
                    #expect(try await api.json("PATCH", "/v1/spaces/\(space)/members/\(coOwner.user)", token: owner.token, ["role": "viewer"]).status == 200)
                default:
                    #expect(try await api.request("DELETE", "/v1/me", token: coOwner.token).status == 204)
                }
                let back = try await api.request("POST", "/v1/invitations/\(kept)/accept", token: coOwner.token)
                #expect(back.status == 404, "\(ending): the creator's own code took them back: \(back.status) \(back.text)")
                let joined = try await api.request("POST", "/v1/invitations/\(forNewcomer)/accept", token: newcomer.token)
                #expect(joined.status == 404, "\(ending): a code of a former owner let someone in: \(joined.text)")
                let members = try await api.request("GET", "/v1/spaces/\(space)/members", token: owner.token).json["items"] as? [[String: Any]]
                let owners = members?.filter { $0["role"] as? String == "owner" }.compactMap { $0["user_id"] as? String }
                #expect(owners == [owner.user], "\(ending): owners are \(String(describing: owners))")
                #expect(members?.contains { $0["user_id"] as? String == newcomer.user } == false)
            }
        }
    }

    /// Owners list open invitations (never their codes) and revoke them; nobody else may.
    @Test func ownersListAndRevokeOpenInvitations() async throws {
        try await InProcessGateway.with { api in
            let owner = try await Member.make(api, "owner"), editor = try await Member.make(api, "editor")
            let stranger = try await Member.make(api, "stranger"), guest = try await Member.make(api, "guest")
            let space = try await api.makeSpace(owner: owner, with: [(editor, "editor")])
            let first = try await api.json("POST", "/v1/spaces/\(space)/invitations", token: owner.token, ["role": "viewer"])
            let second = try await api.json("POST", "/v1/spaces/\(space)/invitations", token: owner.token, ["role": "editor"])
            let firstID = try #require(first.json["invitation_id"] as? String, "\(first.text)")
            let firstCode = try #require(first.json["code"] as? String), secondCode = try #require(second.json["code"] as? String)

            let listed = try await api.request("GET", "/v1/spaces/\(space)/invitations", token: owner.token)
            #expect(listed.status == 200, "\(listed.status) \(listed.text)")
            let items = listed.json["items"] as? [[String: Any]] ?? []
            #expect(items.compactMap { $0["role"] as? String } == ["viewer", "editor"])
            #expect(items.allSatisfy { $0["code"] == nil && $0["created_by"] as? String == owner.user })
            #expect(!listed.text.contains(firstCode) && !listed.text.contains(secondCode), "a listing shows a code")

            #expect(try await api.request("GET", "/v1/spaces/\(space)/invitations", token: editor.token).status == 403)
            #expect(try await api.request("DELETE", "/v1/spaces/\(space)/invitations/\(firstID)", token: editor.token).status == 403)
            let foreign = try await api.request("GET", "/v1/spaces/\(space)/invitations", token: stranger.token)
            let unknown = try await api.request("GET", "/v1/spaces/\(UUID().uuidString.lowercased())/invitations", token: stranger.token)
            #expect(foreign.status == 404 && foreign.body == unknown.body, "a stranger learns the space exists")

            #expect(try await api.request("DELETE", "/v1/spaces/\(space)/invitations/\(firstID)", token: owner.token).status == 204)
            #expect(try await api.request("DELETE", "/v1/spaces/\(space)/invitations/\(firstID)", token: owner.token).status == 404)
            #expect(try await api.request("POST", "/v1/invitations/\(firstCode)/accept", token: guest.token).status == 404)
            #expect(try await api.request("POST", "/v1/invitations/\(secondCode)/accept", token: guest.token).status == 200)
            let left = try await api.request("GET", "/v1/spaces/\(space)/invitations", token: owner.token).json["items"] as? [Any]
            #expect(left?.isEmpty == true, "used and revoked invitations are not open")
        }
    }

    /// Deleting a space while someone accepts its invitation and its owner makes another:
    /// every request ends in its documented answer — never a deadlock, never a 500.
    @Test func deletionAcceptanceAndInvitationRacingEndIn404NeverA500() async throws {
        try await InProcessGateway.with { api in
            let owner = try await Member.make(api, "owner")
            var seen: [String: Set<Int>] = [:]
            for trial in 0..<60 {
                let guest = try await Member.make(api, "guest")
                let space = try await api.makeSpace(owner: owner, with: [])
                let code = try await api.invite(to: space, by: owner, role: "editor")
                async let deleted = api.request("DELETE", "/v1/spaces/\(space)", token: owner.token)
                async let accepted = api.request("POST", "/v1/invitations/\(code)/accept", token: guest.token)
                async let invited = api.json("POST", "/v1/spaces/\(space)/invitations", token: owner.token, ["role": "viewer"])
                let (d, a, i) = try await (deleted, accepted, invited)
                seen["delete", default: []].insert(d.status)
                seen["accept", default: []].insert(a.status)
                seen["invite", default: []].insert(i.status)
                #expect(d.status == 204, "trial \(trial): delete \(d.status) \(d.text)")
                #expect([200, 404].contains(a.status), "trial \(trial): accept \(a.status) \(a.text)")
                #expect([201, 404].contains(i.status), "trial \(trial): invite \(i.status) \(i.text)")
                // Whoever won, the space is gone for the guest too.
                #expect(try await api.request("GET", "/v1/spaces/\(space)/members", token: guest.token).status == 404)
            }
            print("space races: \(seen)")
        }
    }

    /// A space holds at most MAX_OPEN_INVITATIONS open invitations (429 above), and the
    /// owner lists them in pages.
    @Test func openInvitationsAreCappedAndListedInPages() async throws {
        try await InProcessGateway.with(["MAX_OPEN_INVITATIONS": "5"]) { api in
            let owner = try await Member.make(api, "owner")
            let space = try await api.makeSpace(owner: owner, with: [])
            for _ in 0..<5 { _ = try await api.invite(to: space, by: owner, role: "viewer") }
            let sixth = try await api.json("POST", "/v1/spaces/\(space)/invitations", token: owner.token, ["role": "viewer"])
            #expect(sixth.status == 429 && sixth.json["code"] as? String == "rate_limited", "\(sixth.text)")
            var seen: [String] = []
            var cursor: String?
            repeat {
                let page = try await api.request(
                    "GET", "/v1/spaces/\(space)/invitations?limit=2" + (cursor.map { "&cursor=\($0)" } ?? ""), token: owner.token)
                #expect(page.status == 200)
                let items = page.json["items"] as? [[String: Any]] ?? []
                #expect(items.count <= 2)
                seen += items.compactMap { $0["invitation_id"] as? String }
                #expect(page.json.keys.contains("next_cursor"))
                cursor = page.json["next_cursor"] as? String
            } while cursor != nil && seen.count < 10
            #expect(seen.count == 5 && Set(seen).count == 5, "\(seen)")
            #expect(try await api.request("GET", "/v1/spaces/\(space)/invitations?cursor=nope", token: owner.token).status == 400)
            #expect(try await api.request("DELETE", "/v1/spaces/\(space)/invitations/\(seen[0])", token: owner.token).status == 204)
            _ = try await api.invite(to: space, by: owner, role: "editor")
        }
    }

    @Test func invitationsAreSingleUseExpireAndCannotBeGuessed() async throws {
        try await InProcessGateway.with { api in
            let owner = try await Member.make(api, "owner"), guest = try await Member.make(api, "guest")
            let space = try #require(try await api.json("POST", "/v1/spaces", token: owner.token, ["name": "Boat"]).json["space_id"] as? String)
            #expect(try await api.request("POST", "/v1/invitations/\(UUID().uuidString)/accept", token: guest.token).status == 404)
            let short = try await api.json("POST", "/v1/spaces/\(space)/invitations", token: owner.token, ["role": "viewer", "expires_in": 60])
            let code = try #require(short.json["code"] as? String)
            #expect(code.count >= 40, "unguessable: \(code.count) characters")
            #expect(try await api.json("POST", "/v1/spaces/\(space)/invitations", token: owner.token, ["role": "admin"]).status == 422)
            #expect(try await api.json("POST", "/v1/spaces/\(space)/invitations", token: owner.token, ["role": "viewer", "expires_in": 5]).status == 422)
            let personal = try #require((try await api.request("GET", "/v1/spaces", token: owner.token).json["items"] as? [[String: Any]])?
                .first { $0["personal"] as? Bool == true }?["space_id"] as? String)
            #expect(try await api.json("POST", "/v1/spaces/\(personal)/invitations", token: owner.token, ["role": "viewer"]).status == 403,
                    "a personal space takes no members")
            #expect(try await api.request("POST", "/v1/invitations/\(code)/accept", token: guest.token).status == 200)
            #expect(try await api.request("POST", "/v1/invitations/\(code)/accept", token: owner.token).status == 404)
        }
    }
}
