import Foundation

/// A signed-in user with one registered device, as most tests start.
public struct Member: Sendable {
    public let user: String
    public let token: String
    public let device: String

    public init(user: String, token: String, device: String) {
        self.user = user
        self.token = token
        self.device = device
    }

    /// A new user named after `name` (plus a random suffix), signed in, with a device.
    public static func make(_ api: APIClient, _ name: String) async throws -> Member {
        let user = "\(name)-\(UUID().uuidString.prefix(6))"
        let token = await Tokens.make(user)
        return Member(user: user, token: token, device: try await api.registerDevice(token))
    }
}

extension APIClient {
    /// The owner makes a space and brings each guest in with their role.
    public func makeSpace(owner: Member, with guests: [(Member, String)] = [], name: String = "Shared") async throws -> String {
        let created = try await json("POST", "/v1/spaces", token: owner.token, ["name": name])
        guard let space = created.json["space_id"] as? String else {
            throw Failure(description: "creating a space answered \(created.status): \(created.text)")
        }
        for (guest, role) in guests {
            let code = try await invite(to: space, by: owner, role: role)
            let accepted = try await request("POST", "/v1/invitations/\(code)/accept", token: guest.token)
            guard accepted.status == 200 else {
                throw Failure(description: "accepting an invitation answered \(accepted.status): \(accepted.text)")
            }
        }
        return space
    }

    /// A code that brings its bearer into `space` with `role`.
    public func invite(to space: String, by member: Member, role: String) async throws -> String {
        let invitation = try await json("POST", "/v1/spaces/\(space)/invitations", token: member.token, ["role": role])
        guard invitation.status == 201, let code = invitation.json["code"] as? String else {
            throw Failure(description: "an invitation answered \(invitation.status): \(invitation.text)")
        }
        return code
    }
}
