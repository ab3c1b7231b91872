import SyncModels

/// Who a verified token speaks for: the user id (from `JWT_USER_CLAIM`, `sub` by
/// default), whether it carries the admin role, and the display name used as a public
/// author. Also what `syncctl token` mints.
public struct Claims: Codable, Sendable, Equatable {
    public var sub: String
    public var exp: Int64
    public var role: String?
    public var name: String?

    public init(sub: String, exp: Int64, role: String? = nil, name: String? = nil) {
        self.sub = sub
        self.exp = exp
        self.role = role
        self.name = name
    }

    /// The user the token speaks for.
    public var user: UserID { UserID(sub) }

    public var isAdmin: Bool { role == "admin" }
}
