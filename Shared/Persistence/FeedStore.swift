import Foundation
import PQBridge
import SyncModels

/// Record feeds (`feeds`, `feed_positions`): every applied change of the spaces a feed
/// covers, delivered to its endpoint in version order per space, at least once. A feed
/// reads records as a pull does — after its position, fenced by the space's counter in
/// the same snapshot, so no change is skipped — and moves its position only once the
/// receiver took the batch. A record changed twice before a batch is read is delivered
/// once, at its latest version (as a pull gives it).
public struct FeedStore: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    // MARK: - Operators

    /// A new feed; its position in each space it covers starts at the space's counter
    /// now (`fromStart`: at 0, so it receives everything the spaces hold). Nil when a named
    /// space does not exist.
    public func create(
        url: String, secret: String, spaces: [SpaceID]?, collections: [String]?, fromStart: Bool, actor: String
    ) async throws -> FeedView? {
        let id = FeedID.random()
        let created = try await pool.transaction { connection -> Bool in
            if let spaces, !(try SpaceStore.allExist(connection, spaces)) { return false }
            try connection.execute("""
                INSERT INTO feeds (feed_id, url, secret, spaces, collections, created_by)
                VALUES (\(id), \(url), \(secret), \(spaces.map { Array(Set($0)).sorted() }), \(collections), \(actor))
                """)
            try connection.execute("""
                INSERT INTO feed_positions (feed_id, space_id, version)
                SELECT \(id), s.space_id, CASE WHEN \(fromStart) THEN 0 ELSE coalesce(c.counter, 0) END
                FROM spaces s LEFT JOIN space_counters c USING (space_id)
                WHERE \(spaces)::uuid[] IS NULL OR s.space_id = ANY(\(spaces))
                """)
            try connection.execute("""
                INSERT INTO admin_audit (actor, action, target, count) VALUES (\(actor), 'feed_create', \(id.description), 1)
                """)
            return true
        }
        guard created else { return nil }
        return try await list(id: id).first
    }

    /// The feeds (or one), each with its positions.
    public func list(id: FeedID? = nil) async throws -> [FeedView] {
        var feeds: [FeedView] = []
        for row in try await pool.execute("""
            SELECT f.feed_id, f.url, f.spaces::text[], f.collections, f.created_by, syncline_rfc3339(f.created_at),
                   coalesce(p.positions, '[]')
            FROM feeds f LEFT JOIN LATERAL (
              SELECT json_agg(json_build_object('space_id', space_id, 'version', version, 'attempts', attempts,
                                                'dead', dead, 'last_error', last_error) ORDER BY space_id) AS positions
              FROM feed_positions WHERE feed_id = f.feed_id) p ON true
            WHERE \(id)::uuid IS NULL OR f.feed_id = \(id)
            ORDER BY f.created_at, f.feed_id
            """) {
            let (feed, url, spaces, collections, createdBy, createdAt, positions) =
                try row.decode((String, String, [String]?, [String]?, String, String, PGJSON).self)
            feeds.append(FeedView(
                feedID: feed, url: url, spaces: spaces, collections: collections, createdBy: createdBy, createdAt: createdAt,
                positions: try JSONCoding.decode([FeedPosition].self, from: positions.text)))
        }
        return feeds
    }

    public func delete(id: FeedID, actor: String) async throws -> Bool {
        try await pool.transaction { connection in
            guard try connection.execute("DELETE FROM feeds WHERE feed_id = \(id) RETURNING 1").count > 0 else { return false }
            try connection.execute("DELETE FROM dead_letters WHERE queue = 'feed' AND payload::jsonb ->> 'feed_id' = \(id.description)")
            try connection.execute("""
                INSERT INTO admin_audit (actor, action, target, count) VALUES (\(actor), 'feed_delete', \(id.description), 1)
                """)
            return true
        }
    }

    /// Delivers again from `version` (nil: where each position is), in one space or all
    /// the feed covers; a stopped position starts again (its dead letter goes). Answers how
    /// many positions moved, or nil when the feed is unknown.
    public func replay(id: FeedID, space: SpaceID?, from version: Int64?, actor: String) async throws -> Int? {
        try await pool.transaction { connection in
            guard try connection.execute("SELECT 1 FROM feeds WHERE feed_id = \(id) FOR UPDATE").count > 0 else { return nil }
            // A space the feed covers but has no position in yet gets one.
            if let space {
                try connection.execute("""
                    INSERT INTO feed_positions (feed_id, space_id, version)
                    SELECT feed_id, \(space), 0 FROM feeds
                    WHERE feed_id = \(id) AND (spaces IS NULL OR \(space) = ANY(spaces))
                      AND EXISTS (SELECT 1 FROM spaces WHERE space_id = \(space))
                    ON CONFLICT DO NOTHING
                    """)
            }
            let moved = try connection.execute("""
                UPDATE feed_positions SET version = coalesce(\(version), version), dead = false, attempts = 0,
                  next_attempt_at = clock_timestamp(), leased_until = NULL, last_error = NULL
                WHERE feed_id = \(id) AND (\(space)::uuid IS NULL OR space_id = \(space))
                RETURNING 1
                """).count
            try connection.execute("""
                DELETE FROM dead_letters WHERE queue = 'feed' AND payload::jsonb ->> 'feed_id' = \(id.description)
                  AND (\(space)::uuid IS NULL OR space_id = \(space))
                """)
            try connection.execute("""
                INSERT INTO admin_audit (actor, action, target, count)
                VALUES (\(actor), 'feed_replay', \("\(id) from \(version.map(String.init) ?? "its position")"), \(Int32(moved)))
                """)
            return moved
        }
    }

    // MARK: - Delivery

    /// A position due for delivery, leased to the caller.
    public struct Due: Sendable, Equatable {
        public let feed: FeedID
        public let space: SpaceID
        public let url: String
        public let secret: String
        public let collections: [String]?
        /// Delivered up to here.
        public let version: Int64
        public let attempts: Int
    }

    /// Gives the spaces made since a feed was created (and covered by it) a position at 0.
    public func discover() async throws {
        try await pool.execute("""
            INSERT INTO feed_positions (feed_id, space_id, version)
            SELECT f.feed_id, s.space_id, 0 FROM feeds f JOIN spaces s ON f.spaces IS NULL OR s.space_id = ANY(f.spaces)
            WHERE s.created_at >= f.created_at
              AND NOT EXISTS (SELECT 1 FROM feed_positions p WHERE p.feed_id = f.feed_id AND p.space_id = s.space_id)
            ON CONFLICT DO NOTHING
            """)
    }

    /// Leases up to `limit` positions behind their space's counter and due, for `lease`
    /// seconds, at most `perFeed` of each feed and none of `busy` feeds (the caller's
    /// deliveries in flight): a slow receiver holds only its own feed's share.
    public func claim(limit: Int, perFeed: Int, busy: [FeedID: Int], lease: Double) async throws -> [Due] {
        let busyFeeds = Array(busy.keys), busyCounts = busyFeeds.map { Int32(busy[$0] ?? 0) }
        return try await pool.execute("""
            WITH candidates AS (
              SELECT p.feed_id, p.space_id,
                     row_number() OVER (PARTITION BY p.feed_id ORDER BY p.next_attempt_at) + coalesce(b.n, 0) AS rank
              FROM feed_positions p JOIN space_counters c USING (space_id)
              LEFT JOIN unnest(\(busyFeeds)::uuid[], \(busyCounts)::int[]) AS b(feed_id, n) ON b.feed_id = p.feed_id
              WHERE NOT p.dead AND p.version < c.counter AND p.next_attempt_at <= clock_timestamp()
                AND (p.leased_until IS NULL OR p.leased_until < clock_timestamp())),
            chosen AS (
              SELECT p.feed_id, p.space_id FROM feed_positions p JOIN candidates k USING (feed_id, space_id)
              WHERE k.rank <= \(Int64(perFeed))
              ORDER BY p.next_attempt_at LIMIT \(Int64(limit))
              FOR UPDATE OF p SKIP LOCKED)
            UPDATE feed_positions p SET leased_until = clock_timestamp() + make_interval(secs => \(lease))
            FROM chosen, feeds f
            WHERE p.feed_id = chosen.feed_id AND p.space_id = chosen.space_id AND f.feed_id = p.feed_id
            RETURNING p.feed_id, p.space_id, f.url, f.secret, f.collections, p.version, p.attempts
            """).map { row in
            let (feed, space, url, secret, collections, version, attempts) =
                try row.decode((FeedID, SpaceID, String, String, [String]?, Int64, Int).self)
            return Due(feed: feed, space: space, url: url, secret: secret, collections: collections, version: version, attempts: attempts)
        }
    }

    /// The changes after the position, up to `limit` records, and the version delivering
    /// them reaches: the last record's when more follow, else the space's counter (every
    /// version up to it had committed in this snapshot).
    public func batch(_ due: Due, limit: Int) async throws -> (records: [BackendRecord], through: Int64) {
        let rows = try await pool.execute("""
            SELECT c.counter, \(sql: BackendRecordStore.columns)
            FROM space_counters c LEFT JOIN LATERAL (
              SELECT * FROM records r
              WHERE r.space_id = c.space_id AND r.version > \(due.version) AND \(sql: BackendRecordStore.holdsData)
                AND (\(due.collections)::text[] IS NULL OR r.collection = ANY(\(due.collections)))
              ORDER BY r.version LIMIT \(Int64(limit + 1))) r ON true
            WHERE c.space_id = \(due.space)
            ORDER BY r.version
            """)
        guard let first = rows.first else { return ([], due.version) }
        let counter = try first.decode(Int64.self, at: 0)
        if first.isNull(at: 1) { return ([], max(counter, due.version)) }
        var records: [BackendRecord] = []
        for row in rows.prefix(limit) {
            records.append(try BackendRecordStore.record(row, from: 1))
        }
        let through = rows.count > limit ? records[records.count - 1].version : max(counter, due.version)
        return (records, through)
    }

    /// The receiver took everything through `through`: the position moves there, unless an
    /// operator moved it meanwhile (a replay wins).
    public func delivered(_ due: Due, through: Int64) async throws {
        try await pool.execute("""
            UPDATE feed_positions SET version = \(through), attempts = 0, leased_until = NULL, last_error = NULL,
              next_attempt_at = clock_timestamp()
            WHERE feed_id = \(due.feed) AND space_id = \(due.space) AND version = \(due.version)
            """)
    }

    /// A delivery failed: tried again after `retryIn` seconds, or (nil) the position stops
    /// and a dead letter (`queue=feed`) names it until an operator replays it.
    public func failed(_ due: Due, error: String, retryIn: Double?, through: Int64) async throws {
        try await pool.transaction { connection in
            let stopped = retryIn == nil
            let changed = try connection.execute("""
                UPDATE feed_positions SET attempts = attempts + 1, leased_until = NULL, last_error = \(error),
                  dead = \(stopped), next_attempt_at = clock_timestamp() + make_interval(secs => \(retryIn ?? 0))
                WHERE feed_id = \(due.feed) AND space_id = \(due.space) AND version = \(due.version)
                RETURNING attempts
                """)
            guard stopped, let attempts = try changed.first?.decode(Int.self, at: 0) else { return }
            let payload = try JSONCoding.encodeString(FeedDeadLetter(
                feedID: due.feed.description, spaceID: due.space.description, fromVersion: due.version, throughVersion: through,
                url: due.url))
            try connection.execute("""
                INSERT INTO dead_letters (dead_letter_id, queue, reason, last_error, attempts, payload, space_id)
                VALUES (\(Self.deadLetterID(due)), 'feed', 'max_attempts', \(error), \(Int32(attempts)), \(payload), \(due.space))
                ON CONFLICT (dead_letter_id) DO UPDATE SET last_error = EXCLUDED.last_error, attempts = EXCLUDED.attempts,
                  payload = EXCLUDED.payload, dead_at = clock_timestamp()
                """)
        }
    }

    /// Gives back leases this process holds (on shutdown), so another replica takes them at once.
    public func release(_ dues: [Due]) async throws {
        guard !dues.isEmpty else { return }
        try await pool.execute("""
            UPDATE feed_positions p SET leased_until = NULL
            FROM unnest(\(dues.map(\.feed)), \(dues.map(\.space))) AS d(feed_id, space_id)
            WHERE p.feed_id = d.feed_id AND p.space_id = d.space_id
            """)
    }

    /// One dead letter per feed and space: the position is stopped where it is.
    static func deadLetterID(_ due: Due) -> UUID {
        var bytes = Array(due.feed.uuid.uuidBytes)
        withUnsafeBytes(of: due.space.uuid.uuid) { space in for index in 0..<16 { bytes[index] ^= space[index] } }
        bytes[6] = (bytes[6] & 0x0F) | 0x80
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        return UUID(uuid: (bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                           bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]))
    }
}

/// What a feed's dead letter holds: where its position stopped.
public struct FeedDeadLetter: Codable, Sendable, Equatable {
    public let feedID: String
    public let spaceID: String
    public let fromVersion: Int64
    public let throughVersion: Int64
    public let url: String

    enum CodingKeys: String, CodingKey {
        case feedID = "feed_id", spaceID = "space_id", fromVersion = "from_version", throughVersion = "through_version", url
    }
}

extension UUID {
    var uuidBytes: [UInt8] { withUnsafeBytes(of: uuid) { Array($0) } }
}
