import Foundation
import PQBridge
import SyncModels

/// Erasing a user's account data (`DELETE /v1/me`, `syncctl users delete`): their personal
/// space's records (published ones included), tombstones, jobs, op results, idempotency
/// keys, devices, dead letters, counters, clocks, open invitations, and their name on what
/// they published in shared spaces — in bounded batches, each its own short
/// transaction, so other users never wait behind one large account.
public struct AccountStore: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    public static let batchSize = 1000

    public enum DeletionStatus: String, Sendable {
        case inProgress = "in_progress"
        case done
    }

    public struct Deletion: Sendable {
        public let status: DeletionStatus
        public let requestedAt: String
        public let finishedAt: String?
    }

    /// Starts (or restarts) the deletion. Under the user's clock row lock — the lock every
    /// push's intake takes — the devices are revoked, so a push either committed its job
    /// before (and that job is erased below) or finds its device revoked.
    public func begin(user: UserID, userHash: String) async throws {
        try await pool.transaction { connection in
            try DeviceStore.lockClock(connection, user: user)
            try connection.execute("UPDATE devices SET revoked_at = coalesce(revoked_at, now()) WHERE user_id = \(user)")
            try connection.execute("""
                INSERT INTO account_deletions (user_hash, user_id) VALUES (\(userHash), \(user))
                ON CONFLICT (user_hash) DO UPDATE SET user_id = EXCLUDED.user_id, finished_at = NULL,
                  requested_at = clock_timestamp()
                """)
        }
    }

    /// Deletes one batch; false once nothing of the user is left. Jobs go first: a worker
    /// applying one holds its row, so the delete waits for that commit and the records it
    /// wrote are erased by the batches after it.
    public func eraseBatch(user: UserID) async throws -> Bool {
        let limit = Self.batchSize
        let personal = "(SELECT space_id FROM spaces WHERE personal_of = "
        let steps: [PGQuery] = [
            """
            WITH gone AS (
              DELETE FROM jobs WHERE job_id IN (SELECT job_id FROM jobs WHERE user_id = \(user) LIMIT \(limit)) RETURNING job_id)
            INSERT INTO forgotten_jobs (job_id) SELECT job_id FROM gone ON CONFLICT DO NOTHING
            """,
            """
            DELETE FROM records WHERE (space_id, collection, record_id) IN (
              SELECT space_id, collection, record_id FROM records WHERE space_id = \(sql: personal)\(user)) LIMIT \(limit))
            """,
            // Who forked their records. Their own forks stay, as digests no longer tied to an
            // account, so that forking again after a new sign-up does not count twice.
            """
            DELETE FROM forks WHERE (source_space_id, source_collection, source_record_id, forker_hash) IN (
              SELECT source_space_id, source_collection, source_record_id, forker_hash FROM forks
              WHERE source_space_id = \(sql: personal)\(user)) LIMIT \(limit))
            """,
            // What they published in shared spaces stays with the space, but names nobody.
            """
            UPDATE records SET author = NULL, author_user = NULL WHERE (space_id, collection, record_id) IN (
              SELECT space_id, collection, record_id FROM records WHERE author_user = \(user) LIMIT \(limit))
            """,
            """
            DELETE FROM op_ids WHERE (space_id, op_id) IN (
              SELECT space_id, op_id FROM op_ids WHERE space_id = \(sql: personal)\(user)) LIMIT \(limit))
            """,
            """
            DELETE FROM dead_letters WHERE dead_letter_id IN (
              SELECT dead_letter_id FROM dead_letters WHERE user_id = \(user) LIMIT \(limit))
            """,
            "DELETE FROM devices WHERE device_id IN (SELECT device_id FROM devices WHERE user_id = \(user) LIMIT \(limit))",
        ]
        for step in steps where try await pool.execute(step).affectedRows > 0 {
            return true
        }
        return false
    }

    /// The last rows: the counter and the clock, then the deletion forgets the user id.
    public func finish(user: UserID, userHash: String) async throws {
        try await pool.transaction { connection in
            try connection.execute(
                "DELETE FROM space_counters WHERE space_id = (SELECT space_id FROM spaces WHERE personal_of = \(user))")
            // The personal space (its members go with it) and every other membership.
            try connection.execute("DELETE FROM spaces WHERE personal_of = \(user)")
            try Self.leaveSharedSpaces(connection, user: user)
            try connection.execute("DELETE FROM user_clocks WHERE user_id = \(user)")
            try connection.execute(
                "UPDATE account_deletions SET user_id = NULL, finished_at = clock_timestamp() WHERE user_hash = \(userHash)")
        }
    }

    /// The user's memberships end. A shared space they were the last owner of passes to its
    /// longest-standing editor (else its longest-standing member); one with no other member
    /// is deleted with its records. Records in shared spaces stay with the space.
    static func leaveSharedSpaces(_ connection: PGConnection, user: UserID) throws {
        // The spaces' locks first, in order, as every change to a space's members takes them.
        try connection.execute("""
            SELECT s.space_id FROM spaces s JOIN space_members m USING (space_id)
            WHERE m.user_id = \(user) ORDER BY s.space_id FOR NO KEY UPDATE OF s
            """)
        let (owner, editor) = (SpaceRole.owner, SpaceRole.editor)
        try connection.execute("""
            WITH lonely AS (
              SELECT m.space_id FROM space_members m
              WHERE m.user_id = \(user) AND m.role = \(owner)
                AND NOT EXISTS (
                  SELECT 1 FROM space_members o WHERE o.space_id = m.space_id AND o.role = \(owner) AND o.user_id <> \(user))),
            heirs AS (
              SELECT DISTINCT ON (space_id) space_id, user_id FROM space_members
              WHERE space_id IN (SELECT space_id FROM lonely) AND user_id <> \(user)
              ORDER BY space_id, (role = \(editor)) DESC, joined_at, user_id)
            UPDATE space_members m SET role = \(owner) FROM heirs h WHERE m.space_id = h.space_id AND m.user_id = h.user_id
            """)
        let empty = try connection.execute("""
            SELECT m.space_id FROM space_members m
            WHERE m.user_id = \(user)
              AND NOT EXISTS (SELECT 1 FROM space_members o WHERE o.space_id = m.space_id AND o.user_id <> \(user))
            """).map { try $0.decode(SpaceID.self, at: 0) }
        try SpaceStore.erase(connection, spaces: empty)
        try connection.execute("DELETE FROM space_members WHERE user_id = \(user)")
        try connection.execute("DELETE FROM space_invitations WHERE created_by = \(user) AND used_at IS NULL")
    }

    public func deletion(userHash: String) async throws -> Deletion? {
        try await pool.execute("""
            SELECT finished_at IS NOT NULL, syncline_rfc3339(requested_at), syncline_rfc3339(finished_at)
            FROM account_deletions WHERE user_hash = \(userHash)
            """).first.map { row in
            let (done, requestedAt, finishedAt) = try row.decode((Bool, String, String?).self)
            return Deletion(status: done ? .done : .inProgress, requestedAt: requestedAt, finishedAt: finishedAt)
        }
    }

    /// Deletions left unfinished (the process erasing them stopped), oldest first.
    public func unfinished(olderThan seconds: Int) async throws -> [UserID] {
        try await pool.execute("""
            SELECT user_id FROM account_deletions
            WHERE finished_at IS NULL AND requested_at < clock_timestamp() - make_interval(secs => \(Double(seconds)))
            ORDER BY requested_at LIMIT 100
            """).map { try $0.decode(UserID.self, at: 0) }
    }

    /// Whether a job was erased with its account (its queued message is then dropped).
    public func wasForgotten(_ job: JobID) async throws -> Bool {
        try await pool.execute("SELECT 1 FROM forgotten_jobs WHERE job_id = \(job)").first != nil
    }
}
