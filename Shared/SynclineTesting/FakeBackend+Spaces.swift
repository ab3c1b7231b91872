import Foundation
import SyncModels

/// Members and invitations of shared spaces, as the gateway serves them.
extension FakeBackend {
    struct Invitation {
        let id: String
        let space: String
        let role: SpaceRole
        let createdBy: String
        let createdAt: String
        let expiresAt: Date
    }

    /// Answers the members and invitations routes (nil: not one of them).
    mutating func answerSpaces(
        _ request: FakeRequest, route: String, named: String, user: String, deliveries: inout [Delivery]
    ) -> FakeAnswer? {
        switch (request.method, route) {
        case ("GET", "/v1/spaces/:id/members"):
            guard let space = spaces[Names.canonicalUUID(named) ?? named], space.members[user] != nil else {
                return .problem(404, "not_found", "No such space.")
            }
            let members = space.members.sorted { $0.key < $1.key }.map { MemberView(userID: $0.key, role: $0.value, joinedAt: space.createdAt) }
            return .json(200, MemberList(items: members))
        case ("POST", "/v1/spaces/:id/invitations"):
            return invite(request, space: Names.canonicalUUID(named) ?? named, user: user)
        case ("POST", "/v1/invitations/:id/accept"):
            return accept(code: named, user: user, deliveries: &deliveries)
        default:
            return nil
        }
    }

    mutating func invite(_ request: FakeRequest, space id: String, user: String) -> FakeAnswer {
        guard let space = spaces[id], let role = space.members[user] else { return .problem(404, "not_found", "No such space.") }
        guard role == .owner, space.personalOf == nil else {
            return .problem(403, "forbidden", "Only an owner invites, and never to a personal space.")
        }
        let body = (try? JSONParser.parse(request.body))?.objectValue ?? [:]
        guard let invited = body["role"]?.stringValue.flatMap(SpaceRole.init(rawValue:)), SpaceRole.memberRoles.contains(invited) else {
            return .problem(422, "invalid_request", "role must be owner, editor or viewer.", members: ["pointer": "/role"])
        }
        let seconds = body["expires_in"]?.intValue ?? 7 * 86_400
        let code = Hex.string((0..<16).map { _ in UInt8.random(in: .min ... .max) })
        let invitation = Invitation(
            id: UUID().uuidString.lowercased(), space: id, role: invited, createdBy: user, createdAt: Timestamp.format(Date()),
            expiresAt: Date().addingTimeInterval(Double(seconds)))
        invitations[code] = invitation
        return .json(201, InvitationView(
            invitationID: invitation.id, code: code, role: invited, expiresAt: Timestamp.format(invitation.expiresAt)))
    }

    /// The user joins the invitation's space with its role (once: the code is used up).
    mutating func accept(code: String, user: String, deliveries: inout [Delivery]) -> FakeAnswer {
        guard let invitation = invitations[code], invitation.expiresAt > Date(), spaces[invitation.space] != nil else {
            return .problem(404, "not_found", "No such invitation, or it has expired.")
        }
        invitations[code] = nil
        if spaces[invitation.space]?.members[user] == nil { spaces[invitation.space]?.members[user] = invitation.role }
        let role = spaces[invitation.space]?.members[user] ?? invitation.role
        return .json(200, JoinedSpace(spaceID: invitation.space, role: role))
    }
}
