import Foundation
import SyncModels

/// Spaces: the user's list, creating one, members and roles, invitations — calls straight
/// to the server (they need it; nothing here is queued offline) — and the client of
/// another space on this device.
extension SyncClient {
    /// The user's spaces, the personal one first.
    public func spaces() async throws -> [SpaceView] {
        try await api.decode(SpaceList.self, "GET", "/v1/spaces", expected: 200).items
    }

    /// Makes a shared space; the user is its owner.
    public func createSpace(name: String) async throws -> SpaceView {
        try await api.decode(SpaceView.self, "POST", "/v1/spaces", body: .object(["name": .string(name)]), expected: 201)
    }

    /// Deletes a shared space the user owns, with everything in it.
    public func deleteSpace(_ spaceID: String) async throws {
        try await api.perform("DELETE", "/v1/spaces/\(Self.pathSegment(spaceID))")
    }

    public func members(of spaceID: String) async throws -> [MemberView] {
        try await api.decode(MemberList.self, "GET", "/v1/spaces/\(Self.pathSegment(spaceID))/members", expected: 200).items
    }

    /// The owner gives a member another role.
    public func setRole(_ role: SpaceRole, of userID: String, in spaceID: String) async throws -> MemberView {
        try await api.decode(
            MemberView.self, "PATCH", "/v1/spaces/\(Self.pathSegment(spaceID))/members/\(Self.pathSegment(userID))",
            body: .object(["role": .string(role.rawValue)]), expected: 200)
    }

    /// The owner removes a member; with the user's own id, the user leaves.
    public func removeMember(_ userID: String, from spaceID: String) async throws {
        try await api.perform("DELETE", "/v1/spaces/\(Self.pathSegment(spaceID))/members/\(Self.pathSegment(userID))")
    }

    /// A single-use invitation code for `role`, to share as a link; valid for `expiresIn`
    /// seconds (the server's default when nil).
    public func invite(to spaceID: String, as role: SpaceRole, expiresIn: Int? = nil) async throws -> InvitationView {
        var body: [String: JSONValue] = ["role": .string(role.rawValue)]
        if let expiresIn { body["expires_in"] = .int(Int64(expiresIn)) }
        return try await api.decode(
            InvitationView.self, "POST", "/v1/spaces/\(Self.pathSegment(spaceID))/invitations", body: .object(body), expected: 201)
    }

    /// The space's open invitations, for its owners (never their codes), every page.
    public func invitations(in spaceID: String) async throws -> [OpenInvitationView] {
        var items: [OpenInvitationView] = []
        var cursor: String?
        repeat {
            let page = try await api.decode(
                InvitationList.self, "GET",
                "/v1/spaces/\(Self.pathSegment(spaceID))/invitations?limit=500" + (cursor.map { "&cursor=\($0)" } ?? ""),
                expected: 200)
            items += page.items
            cursor = page.nextCursor
        } while cursor != nil
        return items
    }

    /// An owner revokes an open invitation: its code stops working.
    public func revokeInvitation(_ invitationID: String, in spaceID: String) async throws {
        try await api.perform(
            "DELETE", "/v1/spaces/\(Self.pathSegment(spaceID))/invitations/\(Self.pathSegment(invitationID))")
    }

    /// Joins the space of an invitation code (404 when it is unknown, used, expired,
    /// revoked, or its creator is no longer an owner).
    public func acceptInvitation(_ code: String) async throws -> JoinedSpace {
        try await api.decode(JoinedSpace.self, "POST", "/v1/invitations/\(Self.pathSegment(code))/accept", expected: 200)
    }

    /// The client of another space (nil: the personal one) on this device: the same server
    /// and sign-in, the same device id — even when neither has reached the server yet (the
    /// first to get there registers the device for both) — and its own local store at
    /// `databasePath`.
    public func client(for spaceID: String?, databasePath: String) async throws -> SyncClient {
        var configuration = self.configuration
        configuration.spaceID = spaceID
        configuration.databasePath = databasePath
        configuration.deviceID = deviceID
        return try SyncClient(configuration, registration: registration)
    }

    /// An id or code as one path segment, whatever the app passes in.
    static func pathSegment(_ text: String) -> String {
        var allowed = CharacterSet.urlPathAllowed
        allowed.remove(charactersIn: "/?#")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }
}
