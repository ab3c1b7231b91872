import Foundation
import PQBridge
import SyncModels

/// Spaces and their members. A request that names no space uses the caller's personal
/// space, made on first use.
public struct SpaceStore: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    /// The user's personal space, made (with the user as owner) when missing.
    public func personalSpace(user: UserID) async throws -> SpaceID {
        try await pool.withConnection { try Self.personalSpace($0, user: user) }
    }

    static func personalSpace(_ connection: PGConnection, user: UserID) throws -> SpaceID {
        for _ in 0..<2 {
            if let row = try connection.execute("""
                WITH existing AS (SELECT space_id FROM spaces WHERE personal_of = \(user)),
                created AS (
                  INSERT INTO spaces (space_id, name, personal_of)
                  SELECT \(UUID()), 'Personal', \(user) WHERE NOT EXISTS (SELECT 1 FROM existing)
                  ON CONFLICT (personal_of) DO NOTHING
                  RETURNING space_id),
                member AS (
                  INSERT INTO space_members (space_id, user_id, role) SELECT space_id, \(user), \(SpaceRole.owner) FROM created)
                SELECT space_id FROM existing UNION ALL SELECT space_id FROM created
                """).first {
                return try row.decode(SpaceID.self, at: 0)
            }
            // Another request made it at the same moment: the second look finds it.
        }
        throw UnexpectedAnswer("the personal space of a user could not be made")
    }

    /// Deletes spaces with everything in them (their members and invitations cascade).
    /// Their counter rows are locked first, in space order, as a worker applying a job
    /// locks them: a job being applied commits before the deletion reads, so its records
    /// are erased here; a job applied after it finds no members and writes nothing.
    public static func erase(_ connection: PGConnection, spaces ids: [SpaceID]) throws {
        guard !ids.isEmpty else { return }
        _ = try lockCounters(connection, spaces: ids)
        try connection.execute("DELETE FROM forks WHERE source_space_id = ANY(\(ids))")
        for table in ["records", "op_ids", "space_counters", "spaces"] {
            try connection.execute("DELETE FROM \(sql: table) WHERE space_id = ANY(\(ids))")
        }
    }

    /// Locks the spaces' counter rows, in space order, created when missing: the lock a
    /// worker holds from before it reads a space's members until its batch commits. A
    /// change to who may write takes it after the space's own lock, so a batch that read
    /// the members before the change commits first (and its ops count as written before
    /// it), and a batch after it reads the change. Returns each space's counter: the
    /// version every op applied before the change is at or below.
    static func lockCounters(_ connection: PGConnection, spaces ids: [SpaceID]) throws -> [SpaceID: Int64] {
        var counters: [SpaceID: Int64] = [:]
        for row in try connection.execute("""
            INSERT INTO space_counters (space_id) SELECT s FROM unnest(\(ids)) AS s ORDER BY s
            ON CONFLICT (space_id) DO UPDATE SET space_id = EXCLUDED.space_id
            RETURNING space_id, counter
            """) {
            let (space, counter) = try row.decode((SpaceID, Int64).self)
            counters[space] = counter
        }
        return counters
    }

    /// Locks the space's row and reads the caller's role there; nil when the space is gone
    /// or the caller is no member. Every change to a space's members, invitations or
    /// existence takes this lock first, so two of them wait for each other instead of
    /// deadlocking, and each sees what the one before it committed. (`NO KEY UPDATE`: a
    /// worker creating the space's counter, whose foreign key takes a key-share lock on
    /// this row, does not wait for it — the counter's own lock orders the two.)
    static func lock(_ connection: PGConnection, space: SpaceID, user: UserID) throws -> (role: SpaceRole, personal: Bool)? {
        guard let row = try connection.execute("""
            SELECT m.role, s.personal_of IS NOT NULL FROM space_members m JOIN spaces s USING (space_id)
            WHERE m.space_id = \(space) AND m.user_id = \(user) FOR NO KEY UPDATE OF s
            """).first else { return nil }
        let (stored, personal) = try row.decode((String, Bool).self)
        guard let role = SpaceRole(rawValue: stored) else { return nil }
        return (role, personal)
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
        /// The space holds as many open invitations as it may: 429.
        case tooManyInvitations
    }

    public func create(user: UserID, name: String) async throws -> SpaceView {
        try await pool.transaction { connection in
            let id = SpaceID.random()
            guard let row = try connection.execute("""
                WITH space AS (INSERT INTO spaces (space_id, name) VALUES (\(id), \(name)) RETURNING space_id, created_at),
                member AS (
                  INSERT INTO space_members (space_id, user_id, role) SELECT space_id, \(user), \(SpaceRole.owner) FROM space)
                SELECT syncline_rfc3339(created_at) FROM space
                """).first
            else { throw UnexpectedAnswer("the space was not created") }
            return SpaceView(
                spaceID: id.description, name: name, role: .owner, personal: false,
                createdAt: try row.decode(String.self, at: 0))
        }
    }

    /// The user's spaces, the personal one first.
    public func list(user: UserID) async throws -> [SpaceView] {
        _ = try await personalSpace(user: user)
        return try await pool.execute("""
            SELECT s.space_id, s.name, m.role, s.personal_of IS NOT NULL, syncline_rfc3339(s.created_at)
            FROM space_members m JOIN spaces s USING (space_id)
            WHERE m.user_id = \(user)
            ORDER BY s.personal_of IS NULL, m.joined_at, s.space_id
            """).map { row in
            let (id, name, role, personal, createdAt) = try row.decode((String, String, String, Bool, String).self)
            return SpaceView(spaceID: id, name: name, role: SpaceRole(rawValue: role) ?? .viewer, personal: personal, createdAt: createdAt)
        }
    }

    /// The user's role in the space; nil when they are no member (or it does not exist).
    public func role(user: UserID, space: SpaceID) async throws -> SpaceRole? {
        try await pool.execute(
            "SELECT role FROM space_members WHERE space_id = \(space) AND user_id = \(user)"
        ).first.map { try $0.decode(String.self, at: 0) }.flatMap(SpaceRole.init(rawValue:))
    }

    /// The owner deletes a shared space and everything in it; `members` are whom it had.
    public func delete(user: UserID, space id: SpaceID) async throws -> (change: Change, members: [UserID]) {
        try await pool.transaction { connection in
            guard let mine = try Self.lock(connection, space: id, user: user) else { return (.notFound, []) }
            guard mine.role == .owner, !mine.personal else { return (.forbidden, []) }
            let members = try connection.execute("SELECT user_id FROM space_members WHERE space_id = \(id)")
                .map { try $0.decode(UserID.self, at: 0) }
            try Self.erase(connection, spaces: [id])
            return (.done, members)
        }
    }

    public func members(user: UserID, space id: SpaceID) async throws -> [MemberView]? {
        guard try await role(user: user, space: id) != nil else { return nil }
        return try await members(of: id)
    }

    /// The owner changes a member's role (`role`), or removes them (nil); any member may
    /// remove themselves. The last owner can do neither to themselves. `version` is the
    /// space's counter when the change took effect: every op of the member applied under
    /// the old role has a version at or below it, every one after it is judged by the new
    /// role (nil when nothing changed).
    public func change(
        user: UserID, space id: SpaceID, member: UserID, to role: SpaceRole?
    ) async throws -> (change: Change, version: Int64?) {
        try await pool.transaction { connection in
            guard let mine = try Self.lock(connection, space: id, user: user) else { return (.notFound, nil) }
            guard !mine.personal else { return (.forbidden, nil) }
            guard mine.role == .owner || (role == nil && member == user) else { return (.forbidden, nil) }
            return try Self.setMember(connection, space: id, member: member, to: role, mayAdd: false)
        }
    }
}

extension SpaceStore {
    // An invitation is stored as its code's SHA-256, in hex:
    // `encode(sha256(convert_to(code, 'UTF8')), 'hex')`.

    /// The owner makes `code` (the caller draws it at random) a single-use invitation for
    /// `role`, valid for `seconds`; only its SHA-256 is stored.
    /// An owner invites; a space has at most `maxOpen` open invitations (counted under its
    /// lock).
    public func invite(
        user: UserID, space id: SpaceID, role: SpaceRole, seconds: Int, code: String, maxOpen: Int
    ) async throws -> (Change, InvitationView?) {
        try await pool.transaction { connection in
            guard let mine = try Self.lock(connection, space: id, user: user) else { return (.notFound, nil) }
            // A personal space takes no members.
            guard mine.role == .owner, !mine.personal else { return (.forbidden, nil) }
            let open = try connection.execute("""
                SELECT count(*) FROM space_invitations
                WHERE space_id = \(id) AND used_at IS NULL AND expires_at > clock_timestamp()
                """).first?.decode(Int64.self, at: 0) ?? 0
            guard open < maxOpen else { return (.tooManyInvitations, nil) }
            guard let row = try connection.execute("""
                INSERT INTO space_invitations (code_hash, space_id, role, created_by, expires_at)
                VALUES (encode(sha256(convert_to(\(code), 'UTF8')), 'hex'), \(id), \(role), \(user),
                        clock_timestamp() + make_interval(secs => \(Double(seconds))))
                RETURNING invitation_id, syncline_rfc3339(expires_at)
                """).first
            else { throw UnexpectedAnswer("the invitation was not stored") }
            let (invitationID, expiresAt) = try row.decode((String, String).self)
            return (.done, InvitationView(invitationID: invitationID, code: code, role: role, expiresAt: expiresAt))
        }
    }

    /// Joins the space of a valid, unused code; nil when it is unknown, used, expired,
    /// revoked, or its creator is no longer an owner of the space (an invitation carries
    /// its creator's authority only while they hold it). A member already in the space
    /// keeps the higher of the two roles.
    public func accept(user: UserID, code: String) async throws -> (space: SpaceID, role: SpaceRole)? {
        try await pool.transaction { connection in
            guard let found = try connection.execute(
                "SELECT space_id FROM space_invitations WHERE code_hash = encode(sha256(convert_to(\(code), 'UTF8')), 'hex')"
            ).first else { return nil }
            let space = try found.decode(SpaceID.self, at: 0)
            // The space's lock, as every change to its members takes it: a deletion, removal
            // or demotion in progress commits before the invitation is judged.
            guard try connection.execute("SELECT 1 FROM spaces WHERE space_id = \(space) FOR NO KEY UPDATE").first != nil else {
                return nil
            }
            guard let row = try connection.execute("""
                UPDATE space_invitations i SET used_at = clock_timestamp()
                WHERE i.code_hash = encode(sha256(convert_to(\(code), 'UTF8')), 'hex')
                  AND i.used_at IS NULL AND i.expires_at > clock_timestamp()
                  AND EXISTS (SELECT 1 FROM space_members c
                              WHERE c.space_id = i.space_id AND c.user_id = i.created_by AND c.role = \(SpaceRole.owner))
                RETURNING i.role
                """).first else { return nil }
            let offered = SpaceRole(rawValue: try row.decode(String.self, at: 0)) ?? .viewer
            let (owner, editor, viewer) = (SpaceRole.owner, SpaceRole.editor, SpaceRole.viewer)
            let joined = try connection.execute("""
                INSERT INTO space_members (space_id, user_id, role) VALUES (\(space), \(user), \(offered))
                ON CONFLICT (space_id, user_id) DO UPDATE SET role = CASE
                  WHEN space_members.role = \(literal: owner) OR EXCLUDED.role = \(literal: owner) THEN \(literal: owner)
                  WHEN space_members.role = \(literal: editor) OR EXCLUDED.role = \(literal: editor) THEN \(literal: editor)
                  ELSE \(literal: viewer) END
                RETURNING role
                """).first
            let role = try joined.map { try $0.decode(String.self, at: 0) }.flatMap(SpaceRole.init(rawValue:)) ?? offered
            return (space, role)
        }
    }

    /// The space's open invitations (not used, not expired), for its owners; never a code.
    /// The space's open invitations, oldest first, `limit` at a time after `cursor`.
    public func invitations(user: UserID, space id: SpaceID, limit: Int, cursor: PageCursor?) async throws -> (Change, InvitationList) {
        let none = InvitationList(items: [], nextCursor: nil)
        guard let role = try await role(user: user, space: id) else { return (.notFound, none) }
        guard role == .owner else { return (.forbidden, none) }
        let after = cursor?.time ?? PGTimestamp(microsecondsSince2000: .min)  // -infinity
        let afterID = cursor.flatMap { UUID(uuidString: $0.id) } ?? UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
        let rows = try await pool.execute("""
            SELECT invitation_id, role, created_by, syncline_rfc3339(created_at), syncline_rfc3339(expires_at), created_at
            FROM space_invitations
            WHERE space_id = \(id) AND used_at IS NULL AND expires_at > clock_timestamp()
              AND (created_at, invitation_id) > (\(after), \(afterID))
            ORDER BY created_at, invitation_id
            LIMIT \(limit + 1)
            """)
        let items = try rows.prefix(limit).map { row in
            let (invitationID, role, createdBy, createdAt, expiresAt) = try row.decode((String, String, String, String, String).self)
            return OpenInvitationView(
                invitationID: invitationID, role: SpaceRole(rawValue: role) ?? .viewer, createdBy: createdBy,
                createdAt: createdAt, expiresAt: expiresAt)
        }
        let next = try rows.count > limit
            ? PageCursor(rows[limit - 1].decode(PGTimestamp.self, at: 5), id: rows[limit - 1].decode(String.self, at: 0)).text
            : nil
        return (.done, InvitationList(items: items, nextCursor: next))
    }

    /// An owner revokes an open invitation: its code no longer works.
    public func revokeInvitation(user: UserID, space id: SpaceID, invitation: String) async throws -> Change {
        try await pool.transaction { connection in
            guard let mine = try Self.lock(connection, space: id, user: user) else { return .notFound }
            guard mine.role == .owner else { return .forbidden }
            guard let invitationID = UUID(uuidString: invitation) else { return .notFound }
            let revoked = try connection.execute("""
                DELETE FROM space_invitations
                WHERE space_id = \(id) AND invitation_id = \(invitationID) AND used_at IS NULL AND expires_at > clock_timestamp()
                """)
            return revoked.affectedRows == 1 ? .done : .notFound
        }
    }
}

extension SpaceStore {
    /// Sets `member`'s role (adding them when `mayAdd`), or removes them (nil), in a space
    /// whose row the caller locked. The last owner is kept. Takes the counter lock, so the
    /// version answered divides the member's ops judged by the old role from the new.
    static func setMember(
        _ connection: PGConnection, space id: SpaceID, member: UserID, to role: SpaceRole?, mayAdd: Bool
    ) throws -> (change: Change, version: Int64?) {
        let target = try connection.execute(
            "SELECT role FROM space_members WHERE space_id = \(id) AND user_id = \(member)").first
        guard target != nil || (mayAdd && role != nil) else { return (.notFound, nil) }
        if let target, try target.decode(String.self, at: 0) == SpaceRole.owner.rawValue && role != .owner {
            let owners = try connection.execute(
                "SELECT count(*) FROM space_members WHERE space_id = \(id) AND role = \(SpaceRole.owner)"
            ).first?.decode(Int64.self, at: 0) ?? 0
            if owners <= 1 { return (.lastOwner, nil) }
        }
        // Batches being applied in the space commit first; the ones after read the change.
        let version = try Self.lockCounters(connection, spaces: [id])[id]
        if let role {
            try connection.execute("""
                INSERT INTO space_members (space_id, user_id, role) VALUES (\(id), \(member), \(role))
                ON CONFLICT (space_id, user_id) DO UPDATE SET role = EXCLUDED.role
                """)
        } else {
            try connection.execute("DELETE FROM space_members WHERE space_id = \(id) AND user_id = \(member)")
        }
        // Only an owner may invite: a member who is no longer one loses their open invitations.
        if role != .owner {
            try connection.execute(
                "DELETE FROM space_invitations WHERE space_id = \(id) AND created_by = \(member) AND used_at IS NULL")
        }
        return (.done, version)
    }
}
