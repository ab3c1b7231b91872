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
    /// Their counter rows are locked first, in space order, as a worker applying a job
    /// locks them: a job being applied commits before the deletion reads, so its records
    /// are erased here; a job applied after it finds no members and writes nothing.
    static func erase(_ connection: PGConnection, spaces: [String]) throws {
        guard !spaces.isEmpty else { return }
        try connection.query("""
            INSERT INTO space_counters (space_id) SELECT s FROM unnest($1::uuid[]) AS s ORDER BY s
            ON CONFLICT (space_id) DO UPDATE SET space_id = EXCLUDED.space_id
            """, [spaces.sorted()])
        try connection.query("DELETE FROM forks WHERE source_space_id = ANY($1::uuid[])", [spaces])
        for table in ["records", "op_ids", "space_counters", "spaces"] {
            try connection.query("DELETE FROM \(table) WHERE space_id = ANY($1::uuid[])", [spaces])
        }
    }

    /// Locks the space's row and reads the caller's role there; nil when the space is gone
    /// or the caller is no member. Every change to a space's members, invitations or
    /// existence takes this lock first, so two of them wait for each other instead of
    /// deadlocking, and each sees what the one before it committed. (`NO KEY UPDATE`: a
    /// worker creating the space's counter, whose foreign key takes a key-share lock on
    /// this row, does not wait for it — the counter's own lock orders the two.)
    static func lock(_ connection: PGConnection, space: String, user: String) throws -> (role: SpaceRole, personal: Bool)? {
        guard let row = try connection.query("""
            SELECT m.role, s.personal_of IS NOT NULL AS personal FROM space_members m JOIN spaces s USING (space_id)
            WHERE m.space_id = $1 AND m.user_id = $2 FOR NO KEY UPDATE OF s
            """, [space, user]).first, let role = SpaceRole(rawValue: try row.string("role"))
        else { return nil }
        return (role, try row.bool("personal"))
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
            guard let mine = try Self.lock(connection, space: id, user: user) else { return (.notFound, []) }
            guard mine.role == .owner, !mine.personal else { return (.forbidden, []) }
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
            guard let mine = try Self.lock(connection, space: id, user: user) else { return .notFound }
            guard !mine.personal else { return .forbidden }
            guard mine.role == .owner || (role == nil && member == user) else { return .forbidden }
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
            // Only an owner may invite: a member who is no longer one loses their open invitations.
            if role != .owner {
                try connection.query(
                    "DELETE FROM space_invitations WHERE space_id = $1 AND created_by = $2 AND used_at IS NULL", [id, member])
            }
            return .done
        }
    }
}

extension SpaceStore {
    /// The stored form of the invitation code bound as `$1`: its SHA-256, in hex.
    static let codeHash = "encode(sha256(convert_to($1, 'UTF8')), 'hex')"

    /// The owner makes `code` (the caller draws it at random) a single-use invitation for
    /// `role`, valid for `seconds`; only its SHA-256 is stored.
    public func invite(
        user: String, space: String, role: SpaceRole, seconds: Int, code: String
    ) async throws -> (Change, InvitationView?) {
        guard let id = Names.canonicalUUID(space) else { return (.notFound, nil) }
        return try await pool.transaction { connection in
            guard let mine = try Self.lock(connection, space: id, user: user) else { return (.notFound, nil) }
            // A personal space takes no members.
            guard mine.role == .owner, !mine.personal else { return (.forbidden, nil) }
            guard let row = try connection.query("""
                INSERT INTO space_invitations (code_hash, space_id, role, created_by, expires_at)
                VALUES (\(Self.codeHash), $2, $3, $4, clock_timestamp() + make_interval(secs => $5))
                RETURNING invitation_id, syncline_rfc3339(expires_at) AS expires_at
                """, [code, id, role.rawValue, user, seconds]).first
            else { throw PGError(code: .decoding, message: "invitation not stored") }
            return (.done, InvitationView(
                invitationID: try row.string("invitation_id"), code: code, role: role, expiresAt: try row.string("expires_at")))
        }
    }

    /// Joins the space of a valid, unused code; nil when it is unknown, used, expired,
    /// revoked, or its creator is no longer an owner of the space (an invitation carries
    /// its creator's authority only while they hold it). A member already in the space
    /// keeps the higher of the two roles.
    public func accept(user: String, code: String) async throws -> (space: String, role: SpaceRole)? {
        try await pool.transaction { connection in
            guard let found = try connection.query(
                "SELECT space_id FROM space_invitations WHERE code_hash = \(Self.codeHash)", [code]).first
            else { return nil }
            let space = try found.string("space_id")
            // The space's lock, as every change to its members takes it: a deletion, removal
            // or demotion in progress commits before the invitation is judged.
            guard try connection.query("SELECT 1 FROM spaces WHERE space_id = $1 FOR NO KEY UPDATE", [space]).first != nil else {
                return nil
            }
            guard let row = try connection.query("""
                UPDATE space_invitations i SET used_at = clock_timestamp()
                WHERE i.code_hash = \(Self.codeHash) AND i.used_at IS NULL AND i.expires_at > clock_timestamp()
                  AND EXISTS (SELECT 1 FROM space_members c
                              WHERE c.space_id = i.space_id AND c.user_id = i.created_by AND c.role = 'owner')
                RETURNING i.role
                """, [code]).first else { return nil }
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

    /// The space's open invitations (not used, not expired), for its owners; never a code.
    public func invitations(user: String, space: String) async throws -> (Change, [OpenInvitationView]) {
        guard let id = Names.canonicalUUID(space), let role = try await role(user: user, space: id) else { return (.notFound, []) }
        guard role == .owner else { return (.forbidden, []) }
        return try await pool.withConnection { connection in
            let items = try connection.query("""
                SELECT invitation_id, role, created_by, syncline_rfc3339(created_at) AS created_at,
                       syncline_rfc3339(expires_at) AS expires_at
                FROM space_invitations
                WHERE space_id = $1 AND used_at IS NULL AND expires_at > clock_timestamp()
                ORDER BY created_at, invitation_id
                """, [id]).rows.map {
                OpenInvitationView(
                    invitationID: try $0.string("invitation_id"), role: SpaceRole(rawValue: try $0.string("role")) ?? .viewer,
                    createdBy: try $0.string("created_by"), createdAt: try $0.string("created_at"),
                    expiresAt: try $0.string("expires_at"))
            }
            return (.done, items)
        }
    }

    /// An owner revokes an open invitation: its code no longer works.
    public func revokeInvitation(user: String, space: String, invitation: String) async throws -> Change {
        guard let id = Names.canonicalUUID(space) else { return .notFound }
        return try await pool.transaction { connection in
            guard let mine = try Self.lock(connection, space: id, user: user) else { return .notFound }
            guard mine.role == .owner else { return .forbidden }
            guard let invitationID = Names.canonicalUUID(invitation) else { return .notFound }
            let revoked = try connection.query("""
                DELETE FROM space_invitations
                WHERE space_id = $1 AND invitation_id = $2 AND used_at IS NULL AND expires_at > clock_timestamp()
                """, [id, invitationID])
            return revoked.affectedRows == 1 ? .done : .notFound
        }
    }
}
