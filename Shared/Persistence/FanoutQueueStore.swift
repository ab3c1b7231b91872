import PQBridge
import SyncModels

/// The event queues of the running fanout replicas: each replica refreshes its row while
/// it runs, with the streams it holds, and removes it when it stops; a crashed replica's
/// row goes stale.
public struct FanoutQueueStore: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    /// One stream as the support console lists it.
    public struct Stream: Encodable, Sendable {
        public let deviceID: DeviceID
        /// nil: every space of the user.
        public let spaceID: SpaceID?
        public let openedAt: String

        public init(deviceID: DeviceID, spaceID: SpaceID?, openedAt: String) {
            self.deviceID = deviceID
            self.spaceID = spaceID
            self.openedAt = openedAt
        }

        enum CodingKeys: String, CodingKey { case deviceID = "device_id", spaceID = "space_id", openedAt = "opened_at" }
    }

    public func refresh(queue: String, streams: [Stream] = []) async throws {
        let streams = PGJSON(try JSONCoding.encodeString(streams))
        try await pool.execute("""
            INSERT INTO fanout_queues (queue, streams) VALUES (\(queue), \(streams))
            ON CONFLICT (queue) DO UPDATE SET seen_at = now(), streams = EXCLUDED.streams
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
