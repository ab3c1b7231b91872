import PQBridge
import SyncModels

/// Changes since a cursor (no missed changes: versions come from the per-space counter, taken under a
/// row lock in the applying transaction, so committed versions always form a prefix).
public struct PullStore: Sendable {
    /// Pulls may be answered by a replica; a stream's start is read on the primary.
    let reads: ReadPools
    /// Bytes of record data (as JSON text) after which a page ends early (`has_more:
    /// true`), so a pull's memory is bounded whatever the records hold. A page has at least
    /// one record.
    let pageBudget: Int

    public init(reads: ReadPools, pageBudget: Int = 4 << 20) {
        self.reads = reads
        self.pageBudget = pageBudget
    }

    public init(pool: PGPool, pageBudget: Int = 4 << 20) {
        self.init(reads: ReadPools(primary: pool), pageBudget: pageBudget)
    }

    public enum Outcome: Sendable {
        case page(PulledPage)
        /// `since` is older than what purge kept (honest retention).
        case resyncRequired
    }

    /// One statement, so one snapshot: the space's counter and purge horizon are read with
    /// the page. A page that ends (`has_more: false`) answers the counter as its cursor, which
    /// is at or past the purge horizon (a purged newest tombstone must not leave the device
    /// below it, resyncing forever) and cannot skip a change: every version up to the
    /// counter had committed in this snapshot. A record that only a publish or unpublish
    /// reached holds no data and is not shown.
    ///
    /// The page is the records after `since` in version order, up to `limit` and until
    /// their data passes the budget (`data_bytes`, kept by PostgreSQL on every write, so no
    /// record past the budget is read). Record data leaves PostgreSQL as the JSON text it
    /// stores and goes out as is.
    /// `space` nil: the user's personal space, found in the same statement.
    ///
    /// `minCursor`: a cursor the caller knows the space has reached (a job's checkpoint, a
    /// poke's cursor). A replica that has not replayed that far answers a last page whose
    /// cursor is below it; the primary answers instead, so a device still reads its writes.
    public func pull(
        user: UserID, space: String?, since: Int64, limit: Int, collections: [String]?, minCursor: Int64? = nil
    ) async throws -> Outcome {
        try await reads.read(acceptable: { outcome in
            guard let minCursor, case .page(let page) = outcome, !page.hasMore else { return true }
            return (Int64(page.cursor) ?? 0) >= minCursor
        }) { pool in
            try await pull(pool, user: user, space: space, since: since, limit: limit, collections: collections)
        }
    }

    private func pull(
        _ pool: PGPool, user: UserID, space: String?, since: Int64, limit: Int, collections: [String]?
    ) async throws -> Outcome {
        let rows = try await pool.execute("""
            SELECT u.counter, u.horizon, r.fetched, r.collection, r.record_id, r.version, r.deleted, r.data,
                   r.updated_at, r.updated_by,
                   greatest(r.write_clock COLLATE "C", r.delete_clock, r.visibility_clock), r.visibility,
                   r.public_id, r.can_fork, r.published_at, r.forked_from
            FROM (SELECT coalesce(\(space)::uuid, (SELECT space_id FROM spaces WHERE personal_of = \(user))) AS id) s
            CROSS JOIN LATERAL (SELECT coalesce(max(counter), 0) AS counter, coalesce(max(purge_horizon), 0) AS horizon
                  FROM space_counters WHERE space_id = s.id) u
            LEFT JOIN LATERAL (
              SELECT * FROM (
                SELECT r.*, count(*) OVER () AS fetched,
                       sum(r.data_bytes) OVER (ORDER BY r.version) - r.data_bytes AS before
                FROM (
                  SELECT * FROM records r
                  WHERE r.space_id = s.id AND r.version > \(since) AND NOT (\(since) > 0 AND \(since) < u.horizon)
                    AND (r.write_clock IS NOT NULL OR r.delete_clock IS NOT NULL)
                    AND (\(collections == nil) OR r.collection = ANY(\(collections ?? [])))
                  ORDER BY r.version LIMIT \(limit + 1)
                ) r
              ) r
              WHERE r.before < \(pageBudget)
              ORDER BY r.version
            ) r ON true
            """)
        guard let first = rows.first else { throw UnexpectedAnswer("the pull returned no row") }
        let (counter, horizon, fetched) = try first.decode((Int64, Int64, Int64?).self)
        if since > 0 && since < horizon { return .resyncRequired }
        let records: [PGRows.Row] = fetched == nil ? [] : Array(rows.prefix(limit))
        let changes = try records.map { try PulledChange($0, from: 3) }
        // More follows when the limit or the budget cut the page short.
        let hasMore = Int(fetched ?? 0) > changes.count
        let cursor = hasMore ? (changes.last?.version ?? since) : max(since, counter)
        return .page(PulledPage(changes: changes, cursor: String(cursor), hasMore: hasMore))
    }

    /// Where a stream starts: the cursor of each space it covers.
    public struct StreamStart: Sendable, Equatable {
        /// The personal space, or the one the stream is narrowed to.
        public let space: String
        public let cursor: String
        /// Every space the stream covers, with its cursor now.
        public let spaces: [String: String]
    }

    /// The cursors a stream's `hello` carries: of `space` alone, or (nil) of every space
    /// of the user, the personal one made if missing. Nil when the user is no member of
    /// `space`.
    public func streamStart(user: UserID, space: String?) async throws -> StreamStart? {
        try await reads.primary.withConnection { connection in
            let main = try space ?? SpaceStore.personalSpace(connection, user: user).description
            var spaces: [String: String] = [:]
            for row in try connection.execute("""
                SELECT m.space_id, coalesce(c.counter, 0)
                FROM space_members m LEFT JOIN space_counters c USING (space_id)
                WHERE m.user_id = \(user) AND (\(space)::uuid IS NULL OR m.space_id = \(space)::uuid)
                """) {
                let (id, counter) = try row.decode((String, Int64).self)
                spaces[id] = String(counter)
            }
            guard let cursor = spaces[main] else { return nil }
            return StreamStart(space: main, cursor: cursor, spaces: spaces)
        }
    }
}
