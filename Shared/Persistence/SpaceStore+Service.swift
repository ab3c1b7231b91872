import PQBridge
import SyncModels

/// Spaces as the app's backend manages them: it is no member, so it names the owner of a
/// space it creates and sets members directly (no invitation).
extension SpaceStore {
    /// Whether the space exists (a service sees every space in its scope).
    public func exists(_ space: SpaceID) async throws -> Bool {
        try await pool.execute("SELECT 1 FROM spaces WHERE space_id = \(space)").count > 0
    }

    /// Whether every space of `ids` exists (what a service token's or a feed's scope names).
    static func allExist(_ connection: PGConnection, _ ids: [SpaceID]) throws -> Bool {
        let known = try connection.execute("SELECT count(*) FROM spaces WHERE space_id = ANY(\(ids))").first?.decode(Int64.self, at: 0) ?? 0
        return known == Set(ids).count
    }

    /// The members of a space; nil when it does not exist.
    public func members(of space: SpaceID) async throws -> [MemberView]? {
        guard try await exists(space) else { return nil }
        return try await pool.execute("""
            SELECT user_id, role, syncline_rfc3339(joined_at) FROM space_members
            WHERE space_id = \(space) ORDER BY joined_at, user_id
            """).map { row in
            let (member, role, joinedAt) = try row.decode((String, String, String).self)
            return MemberView(userID: member, role: SpaceRole(rawValue: role) ?? .viewer, joinedAt: joinedAt)
        }
    }

    /// Adds `member` with `role`, changes their role, or removes them (nil), as an owner
    /// could; a personal space takes no members (`forbidden`), the last owner stays.
    public func setMember(space id: SpaceID, member: UserID, to role: SpaceRole?) async throws -> (change: Change, version: Int64?) {
        try await pool.transaction { connection in
            guard let row = try connection.execute(
                "SELECT personal_of IS NOT NULL FROM spaces WHERE space_id = \(id) FOR NO KEY UPDATE").first
            else { return (.notFound, nil) }
            guard try !row.decode(Bool.self, at: 0) else { return (.forbidden, nil) }
            return try Self.setMember(connection, space: id, member: member, to: role, mayAdd: true)
        }
    }
}
