import PQBridge

/// The event queues of the running fanout replicas: each replica refreshes its row while
/// it runs and removes it when it stops; a crashed replica's row goes stale.
public struct FanoutQueueStore: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    public func refresh(queue: String) async throws {
        try await pool.query("""
            INSERT INTO fanout_queues (queue) VALUES ($1)
            ON CONFLICT (queue) DO UPDATE SET seen_at = now()
            """, [queue])
        try await pool.query("DELETE FROM fanout_queues WHERE seen_at < now() - interval '1 hour'")
    }

    public func remove(queue: String) async throws {
        try await pool.query("DELETE FROM fanout_queues WHERE queue = $1", [queue])
    }

    /// Queues refreshed within `seconds`: shorter than a replica queue's expiry, so each
    /// still exists.
    public func live(within seconds: Int) async throws -> [String] {
        try await pool.query(
            "SELECT queue FROM fanout_queues WHERE seen_at > now() - make_interval(secs => $1) ORDER BY queue", [seconds]
        ).rows.map { try $0.string("queue") }
    }
}
