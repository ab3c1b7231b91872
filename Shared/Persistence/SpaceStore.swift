import Foundation
import PQBridge
import SyncModels

/// Spaces and their members. A request that names no space uses the caller's personal
/// space, made on first use.
public struct SpaceStore: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    /// The user's personal space, made (with the user as owner) when missing.
    public func personalSpace(user: String) async throws -> String {
        try await pool.withConnection { try Self.personalSpace($0, user: user) }
    }

    static func personalSpace(_ connection: PGConnection, user: String) throws -> String {
        for _ in 0..<2 {
            if let row = try connection.query("""
                WITH existing AS (SELECT space_id FROM spaces WHERE personal_of = $1),
                created AS (
                  INSERT INTO spaces (space_id, name, personal_of)
                  SELECT $2::uuid, 'Personal', $1 WHERE NOT EXISTS (SELECT 1 FROM existing)
                  ON CONFLICT (personal_of) DO NOTHING
                  RETURNING space_id),
                member AS (INSERT INTO space_members (space_id, user_id, role) SELECT space_id, $1, 'owner' FROM created)
                SELECT space_id FROM existing UNION ALL SELECT space_id FROM created
                """, [user, UUID().uuidString.lowercased()]).first {
                return try row.string("space_id")
            }
            // Another request made it at the same moment: the second look finds it.
        }
        throw PGError(code: .decoding, message: "personal space of a user could not be made")
    }

    /// Deletes spaces with everything in them (their members and invitations cascade).
    static func erase(_ connection: PGConnection, spaces: [String]) throws {
        guard !spaces.isEmpty else { return }
        for table in ["records", "op_ids", "space_counters", "spaces"] {
            try connection.query("DELETE FROM \(table) WHERE space_id = ANY($1::uuid[])", [spaces])
        }
    }

    /// SQL for the personal space of the user bound as `parameter` (nil until it exists).
    static func personalSpaceSQL(_ parameter: String) -> String {
        "(SELECT space_id FROM spaces WHERE personal_of = \(parameter))"
    }
}

extension SpaceStore {
    /// What a membership change answers.
    public enum Change: Sendable, Equatable {
        case done
        /// The space, or the member, is not there (or the caller is no member): 404.
        case notFound
        /// The caller's role does not allow it: 403.
        case forbidden
        /// The last owner would leave or lose ownership: 409.
        case lastOwner
    }

    public func create(user: String, name: String) async throws -> SpaceView {
        try await pool.transaction { connection in
            let id = UUID().uuidString.lowercased()
            guard let row = try connection.query("""
                WITH space AS (INSERT INTO spaces (space_id, name) VALUES ($1, $2) RETURNING space_id, created_at),
                member AS (INSERT INTO space_members (space_id, user_id, role) SELECT space_id, $3, 'owner' FROM space)
                SELECT space_id, syncline_rfc3339(created_at) AS created_at FROM space
                """, [id, name, user]).first
            else { throw PGError(code: .decoding, message: "space not created") }
            return SpaceView(spaceID: id, name: name, role: .owner, personal: false, createdAt: try row.string("created_at"))
        }
    }

    /// The user's spaces, the personal one first.
    public func list(user: String) async throws -> [SpaceView] {
        _ = try await personalSpace(user: user)
        return try await pool.query("""
            SELECT s.space_id, s.name, m.role, s.personal_of IS NOT NULL AS personal, syncline_rfc3339(s.created_at) AS created_at
            FROM space_members m JOIN spaces s USING (space_id)
            WHERE m.user_id = $1
            ORDER BY s.personal_of IS NULL, m.joined_at, s.space_id
            """, [user]).rows.map(Self.space)
    }

    static func space(_ row: PGRow) throws -> SpaceView {
        SpaceView(
            spaceID: try row.string("space_id"), name: try row.string("name"),
            role: SpaceRole(rawValue: try row.string("role")) ?? .viewer, personal: row["personal"] == "t",
            createdAt: try row.string("created_at"))
    }

    /// The user's role in the space; nil when they are no member (or it does not exist).
    public func role(user: String, space: String) async throws -> SpaceRole? {
        guard let id = Names.canonicalUUID(space) else { return nil }
        return try await pool.query(
            "SELECT role FROM space_members WHERE space_id = $1 AND user_id = $2", [id, user]
        ).first.flatMap { $0["role"] }.flatMap(SpaceRole.init(rawValue:))
    }

    /// The owner deletes a shared space and everything in it; `members` are whom it had.
    public func delete(user: String, space: String) async throws -> (change: Change, members: [String]) {
        guard let id = Names.canonicalUUID(space) else { return (.notFound, []) }
        return try await pool.transaction { connection in
            guard let row = try connection.query("""
                SELECT m.role, s.personal_of IS NOT NULL AS personal FROM space_members m JOIN spaces s USING (space_id)
                WHERE m.space_id = $1 AND m.user_id = $2 FOR UPDATE OF s
                """, [id, user]).first else { return (.notFound, []) }
            guard row["role"] == SpaceRole.owner.rawValue, row["personal"] != "t" else { return (.forbidden, []) }
            let members = try connection.query("SELECT user_id FROM space_members WHERE space_id = $1", [id]).rows
                .compactMap { $0["user_id"] }
            try Self.erase(connection, spaces: [id])
            return (.done, members)
        }
    }

    public func members(user: String, space: String) async throws -> [MemberView]? {
        guard try await role(user: user, space: space) != nil, let id = Names.canonicalUUID(space) else { return nil }
        return try await pool.query("""
            SELECT user_id, role, syncline_rfc3339(joined_at) AS joined_at FROM space_members
            WHERE space_id = $1 ORDER BY joined_at, user_id
            """, [id]).rows.map {
            MemberView(
                userID: try $0.string("user_id"), role: SpaceRole(rawValue: try $0.string("role")) ?? .viewer,
                joinedAt: try $0.string("joined_at"))
        }
    }

    /// The owner changes a member's role (`role`), or removes them (nil); any member may
    /// remove themselves. The last owner can do neither to themselves.
    public func change(user: String, space: String, member: String, to role: SpaceRole?) async throws -> Change {
        guard let id = Names.canonicalUUID(space) else { return .notFound }
        return try await pool.transaction { connection in
            // The space row is locked first: changes to one space's members are serialized.
            guard let mine = try connection.query("""
                SELECT m.role, s.personal_of IS NOT NULL AS personal FROM space_members m JOIN spaces s USING (space_id)
                WHERE m.space_id = $1 AND m.user_id = $2 FOR UPDATE OF s
                """, [id, user]).first else { return .notFound }
            guard mine["personal"] != "t" else { return .forbidden }
            let isOwner = mine["role"] == SpaceRole.owner.rawValue
            guard isOwner || (role == nil && member == user) else { return .forbidden }
            guard let target = try connection.query(
                "SELECT role FROM space_members WHERE space_id = $1 AND user_id = $2", [id, member]).first
            else { return .notFound }
            if target["role"] == SpaceRole.owner.rawValue && role != .owner {
                let owners = try connection.query(
                    "SELECT count(*) AS n FROM space_members WHERE space_id = $1 AND role = 'owner'", [id]).first?.optionalInt("n") ?? 0
                if owners <= 1 { return .lastOwner }
            }
            if let role {
                try connection.query("UPDATE space_members SET role = $3 WHERE space_id = $1 AND user_id = $2", [id, member, role.rawValue])
            } else {
                try connection.query("DELETE FROM space_members WHERE space_id = $1 AND user_id = $2", [id, member])
            }
            return .done
        }
    }
}

extension SpaceStore {
    /// The owner makes `code` (the caller draws it at random) a single-use invitation for
    /// `role`, valid for `seconds`; only its SHA-256 is stored.
    public func invite(
        user: String, space: String, role: SpaceRole, seconds: Int, code: String
    ) async throws -> (Change, InvitationView?) {
        guard let id = Names.canonicalUUID(space) else { return (.notFound, nil) }
        guard let mine = try await self.role(user: user, space: space) else { return (.notFound, nil) }
        guard mine == .owner else { return (.forbidden, nil) }
        guard let row = try await pool.query("""
            INSERT INTO space_invitations (code_hash, space_id, role, created_by, expires_at)
            SELECT encode(sha256(convert_to($1, 'UTF8')), 'hex'), $2::uuid, $3, $4, clock_timestamp() + make_interval(secs => $5)
            FROM spaces WHERE space_id = $2::uuid AND personal_of IS NULL
            RETURNING syncline_rfc3339(expires_at) AS expires_at
            """, [code, id, role.rawValue, user, seconds]).first
        else { return (.forbidden, nil) }  // a personal space takes no members
        return (.done, InvitationView(code: code, role: role, expiresAt: try row.string("expires_at")))
    }

    /// Joins the space of a valid, unused code; nil when it is unknown, used or expired.
    /// A member already in the space keeps the higher of the two roles.
    public func accept(user: String, code: String) async throws -> (space: String, role: SpaceRole)? {
        try await pool.transaction { connection in
            guard let row = try connection.query("""
                UPDATE space_invitations SET used_at = clock_timestamp()
                WHERE code_hash = encode(sha256(convert_to($1, 'UTF8')), 'hex') AND used_at IS NULL
                  AND expires_at > clock_timestamp()
                RETURNING space_id, role
                """, [code]).first else { return nil }
            let space = try row.string("space_id")
            let offered = SpaceRole(rawValue: try row.string("role")) ?? .viewer
            let joined = try connection.query("""
                INSERT INTO space_members (space_id, user_id, role) VALUES ($1, $2, $3)
                ON CONFLICT (space_id, user_id) DO UPDATE SET role = CASE
                  WHEN space_members.role = 'owner' OR EXCLUDED.role = 'owner' THEN 'owner'
                  WHEN space_members.role = 'editor' OR EXCLUDED.role = 'editor' THEN 'editor'
                  ELSE 'viewer' END
                RETURNING role
                """, [space, user, offered.rawValue]).first
            return (space, joined.flatMap { $0["role"] }.flatMap(SpaceRole.init(rawValue:)) ?? offered)
        }
    }
}
