// Spaces as their members see them (`/v1/spaces…`, `/v1/invitations…`).

/// A member's role in a space; `service` is the app's backend writing with a service
/// token, which is never a member (no request can give it to anyone).
public enum SpaceRole: String, Sendable, Codable, CaseIterable {
    case owner, editor, viewer, service

    /// Whether the role may push.
    public var canWrite: Bool { self != .viewer }

    /// The roles a member can hold.
    public static let memberRoles: [SpaceRole] = [.owner, .editor, .viewer]

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let role = SpaceRole(rawValue: text), role != .service else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "a role is owner, editor or viewer"))
        }
        self = role
    }
}

/// A space as its member sees it.
public struct SpaceView: Codable, Sendable, Equatable {
    public var spaceID: String
    public var name: String
    public var role: SpaceRole
    public var personal: Bool
    public var createdAt: String

    public init(spaceID: String, name: String, role: SpaceRole, personal: Bool, createdAt: String) {
        self.spaceID = spaceID
        self.name = name
        self.role = role
        self.personal = personal
        self.createdAt = createdAt
    }

    enum CodingKeys: String, CodingKey {
        case spaceID = "space_id", name, role, personal, createdAt = "created_at"
    }
}

public struct MemberView: Codable, Sendable, Equatable {
    public var userID: String
    public var role: SpaceRole
    public var joinedAt: String

    public init(userID: String, role: SpaceRole, joinedAt: String) {
        self.userID = userID
        self.role = role
        self.joinedAt = joinedAt
    }

    enum CodingKeys: String, CodingKey { case userID = "user_id", role, joinedAt = "joined_at" }
}

/// A new invitation, as its creator gets it: the only answer that carries the code.
public struct InvitationView: Codable, Sendable, Equatable {
    public var invitationID: String
    public var code: String
    public var role: SpaceRole
    public var expiresAt: String

    public init(invitationID: String, code: String, role: SpaceRole, expiresAt: String) {
        self.invitationID = invitationID
        self.code = code
        self.role = role
        self.expiresAt = expiresAt
    }

    enum CodingKeys: String, CodingKey { case invitationID = "invitation_id", code, role, expiresAt = "expires_at" }
}

/// An invitation not yet used nor expired, as the space's owners list it: never its code.
public struct OpenInvitationView: Codable, Sendable, Equatable {
    public var invitationID: String
    public var role: SpaceRole
    public var createdBy: String
    public var createdAt: String
    public var expiresAt: String

    public init(invitationID: String, role: SpaceRole, createdBy: String, createdAt: String, expiresAt: String) {
        self.invitationID = invitationID
        self.role = role
        self.createdBy = createdBy
        self.createdAt = createdAt
        self.expiresAt = expiresAt
    }

    enum CodingKeys: String, CodingKey {
        case invitationID = "invitation_id", role, createdBy = "created_by", createdAt = "created_at", expiresAt = "expires_at"
    }
}

/// A page of a space's open invitations, oldest first.
public typealias InvitationList = Page<OpenInvitationView>

public struct SpaceList: Codable, Sendable, Equatable {
    public var items: [SpaceView]
    public init(items: [SpaceView]) { self.items = items }
}

public struct MemberList: Codable, Sendable, Equatable {
    public var items: [MemberView]
    public init(items: [MemberView]) { self.items = items }
}

/// What accepting an invitation answers: the space joined and the role held there.
public struct JoinedSpace: Codable, Sendable, Equatable {
    public var spaceID: String
    public var role: SpaceRole

    public init(spaceID: String, role: SpaceRole) {
        self.spaceID = spaceID
        self.role = role
    }

    enum CodingKeys: String, CodingKey { case spaceID = "space_id", role }
}
