import PQBridge

/// The event queues of the running fanout replicas: each replica refreshes its row while
/// it runs and removes it when it stops; a crashed replica's row goes stale.
public struct FanoutQueueStore: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    public func refresh(queue: String) async throws {
        try await pool.execute("""
            INSERT INTO fanout_queues (queue) VALUES (\(queue))
            ON CONFLICT (queue) DO UPDATE SET seen_at = now()
            """)
        try await pool.execute("DELETE FROM fanout_queues WHERE seen_at < now() - interval '1 hour'")
    }

    public func remove(queue: String) async throws {
        try await pool.execute("DELETE FROM fanout_queues WHERE queue = \(queue)")
    }

    /// Queues refreshed within `seconds`: shorter than a replica queue's expiry, so each
    /// still exists.
    public func live(within seconds: Int) async throws -> [String] {
        try await pool.execute(
            "SELECT queue FROM fanout_queues WHERE seen_at > now() - make_interval(secs => \(Double(seconds))) ORDER BY queue"
        ).map { try $0.decode(String.self, at: 0) }
    }
}
