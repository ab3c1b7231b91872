// The app's backend as operators and services see it: service tokens (`/v1/admin/service-tokens`,
// `syncctl service-tokens`), record feeds (`/v1/admin/feeds`, `syncctl feeds`) and the data API.

/// The app's backend, as a verified service token names it. Never a member and never a
/// device: it writes into the spaces in its scope as the `service` role.
public struct ServicePrincipal: Sendable, Equatable {
    public let id: ServiceTokenID
    public let name: String
    /// The spaces it may reach; nil: every space.
    public let spaces: Set<SpaceID>?
    public let readOnly: Bool

    public init(id: ServiceTokenID, name: String, spaces: Set<SpaceID>?, readOnly: Bool) {
        self.id = id
        self.name = name
        self.spaces = spaces
        self.readOnly = readOnly
    }

    /// Who the service is in jobs, records and the audit log: `service:<token id>`.
    public var user: UserID { Self.user(id) }

    public static func user(_ id: ServiceTokenID) -> UserID { UserID("\(userPrefix)\(id)") }

    public static let userPrefix = "service:"

    /// The device its ops are stamped with: the token's id (no device is registered).
    public var device: DeviceID { DeviceID(id.uuid) }

    public func covers(_ space: SpaceID) -> Bool { spaces?.contains(space) ?? true }

    /// Service tokens are opaque (not JWTs) and start with this, so that every service can
    /// tell one apart and refuse it where it does not belong.
    public static let tokenPrefix = "sls_"
}

/// A service token as listed (never the token itself, which only its creation shows).
public struct ServiceTokenView: Codable, Sendable, Equatable {
    public var tokenID: String
    public var name: String
    /// nil: every space.
    public var spaces: [String]?
    public var readOnly: Bool
    public var createdBy: String
    public var createdAt: String
    public var revokedAt: String?

    public init(tokenID: String, name: String, spaces: [String]?, readOnly: Bool, createdBy: String, createdAt: String, revokedAt: String?) {
        self.tokenID = tokenID
        self.name = name
        self.spaces = spaces
        self.readOnly = readOnly
        self.createdBy = createdBy
        self.createdAt = createdAt
        self.revokedAt = revokedAt
    }

    enum CodingKeys: String, CodingKey {
        case tokenID = "token_id", name, spaces, readOnly = "read_only", createdBy = "created_by", createdAt = "created_at"
        case revokedAt = "revoked_at"
    }
}

/// A new service token: the only time the token is shown.
public struct CreatedServiceToken: Codable, Sendable, Equatable {
    public var token: String
    public var serviceToken: ServiceTokenView

    public init(token: String, serviceToken: ServiceTokenView) {
        self.token = token
        self.serviceToken = serviceToken
    }

    enum CodingKeys: String, CodingKey { case token, serviceToken = "service_token" }
}

/// A record feed as listed: its endpoint, filter, and per space how far it was delivered.
public struct FeedView: Codable, Sendable, Equatable {
    public var feedID: String
    public var url: String
    public var spaces: [String]?
    public var collections: [String]?
    public var createdBy: String
    public var createdAt: String
    public var positions: [FeedPosition]

    public init(
        feedID: String, url: String, spaces: [String]?, collections: [String]?, createdBy: String, createdAt: String,
        positions: [FeedPosition]
    ) {
        self.feedID = feedID
        self.url = url
        self.spaces = spaces
        self.collections = collections
        self.createdBy = createdBy
        self.createdAt = createdAt
        self.positions = positions
    }

    enum CodingKeys: String, CodingKey {
        case feedID = "feed_id", url, spaces, collections, createdBy = "created_by", createdAt = "created_at", positions
    }
}

/// How far a feed was delivered in one space.
public struct FeedPosition: Codable, Sendable, Equatable {
    public var spaceID: String
    /// Every change up to this version was delivered.
    public var version: Int64
    public var attempts: Int
    /// Stopped after its last attempt (a dead letter, `queue=feed`) until replayed.
    public var dead: Bool
    public var lastError: String?

    public init(spaceID: String, version: Int64, attempts: Int, dead: Bool, lastError: String?) {
        self.spaceID = spaceID
        self.version = version
        self.attempts = attempts
        self.dead = dead
        self.lastError = lastError
    }

    enum CodingKeys: String, CodingKey {
        case spaceID = "space_id", version, attempts, dead, lastError = "last_error"
    }
}

/// A new feed: the only time its signing secret is shown.
public struct CreatedFeed: Codable, Sendable, Equatable {
    public var secret: String
    public var feed: FeedView

    public init(secret: String, feed: FeedView) {
        self.secret = secret
        self.feed = feed
    }
}
