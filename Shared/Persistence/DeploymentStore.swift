import PQBridge
import SyncModels

/// The deployment's generation (`deployment`): a new one after each restore from a backup.
public struct DeploymentStore: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    /// How far each space's counter jumps at a restore: past any version the lost history
    /// can have reached, so none is handed out twice.
    public static let restoreGap: Int64 = 1 << 32

    public func generation() async throws -> Int64 {
        try await pool.execute("SELECT generation FROM deployment").first?.decode(Int64.self, at: 0) ?? 1
    }

    /// After a restore, before the services start: every space's counter jumps by
    /// `restoreGap`, and the versions skipped become a gap — a device whose cursor is
    /// inside one held changes the restore lost, and must pull from the start (410
    /// `resync_required`), keeping its unpushed ops; a cursor at or below what was restored
    /// goes on as before. Answers the new generation. Running it twice makes two gaps and
    /// costs devices nothing more.
    public func restored(actor: String) async throws -> Int64 {
        try await pool.transaction { connection in
            try connection.execute("LOCK TABLE space_counters IN EXCLUSIVE MODE")
            try connection.execute("""
                INSERT INTO cursor_gaps (space_id, after, before)
                SELECT space_id, counter, counter + \(Self.restoreGap) FROM space_counters
                ON CONFLICT (space_id, after) DO UPDATE SET before = EXCLUDED.before
                """)
            let spaces = try connection.execute("UPDATE space_counters SET counter = counter + \(Self.restoreGap) RETURNING 1").count
            // Jobs the backup holds unfinished may have been taken off the broker after it
            // was made: published again by the gateways' relay (an op applies once anyway).
            try connection.execute("""
                UPDATE jobs SET status = 'queued', published_at = NULL WHERE status IN ('queued', 'processing', 'retrying')
                """)
            guard let row = try connection.execute("""
                UPDATE deployment SET generation = generation + 1, changed_at = clock_timestamp() RETURNING generation
                """).first else { throw UnexpectedAnswer("the deployment has no generation row") }
            let generation = try row.decode(Int64.self, at: 0)
            try connection.execute("""
                INSERT INTO admin_audit (actor, action, target, count)
                VALUES (\(actor), 'restored', \("generation \(generation)"), \(Int32(clamping: spaces)))
                """)
            return generation
        }
    }
}
