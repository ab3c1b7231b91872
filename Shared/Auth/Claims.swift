import SyncModels

/// Who a verified token speaks for: the user id (from `JWT_USER_CLAIM`, `sub` by
/// default), whether it carries the admin role, and the display name used as a public
/// author. Also what `syncctl token` mints.
public struct Claims: Codable, Sendable, Equatable {
    public var sub: String
    public var exp: Int64
    public var role: String?
    public var name: String?
    /// `support` when the token carries the support scope (from `JWT_SUPPORT_CLAIM`):
    /// an admin who may see users' record data in the support console.
    public var scope: String?

    public init(sub: String, exp: Int64, role: String? = nil, name: String? = nil, scope: String? = nil) {
        self.sub = sub
        self.exp = exp
        self.role = role
        self.name = name
        self.scope = scope
    }

    /// The user the token speaks for.
    public var user: UserID { UserID(sub) }

    public var isAdmin: Bool { role == "admin" }

    /// An admin with the support scope: may read record data in the support console.
    public var isSupport: Bool { isAdmin && scope?.split(separator: " ").contains("support") == true }
}
