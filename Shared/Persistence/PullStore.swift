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
        user: UserID, space: SpaceID?, since: Int64, limit: Int, collections: [String]?, minCursor: Int64? = nil,
        form: PullForm = .full
    ) async throws -> Outcome {
        try await reads.read(acceptable: { outcome in
            // A replica behind the cursor would send the device to the start: the primary decides.
            guard case .page(let page) = outcome else { return false }
            guard let minCursor, !page.hasMore else { return true }
            return (Int64(page.cursor) ?? 0) >= minCursor
        }) { pool in
            try await pull(pool, user: user, space: space, since: since, limit: limit, collections: collections, form: form)
        }
    }

    private func pull(
        _ pool: PGPool, user: UserID, space: SpaceID?, since: Int64, limit: Int, collections: [String]?, form: PullForm
    ) async throws -> Outcome {
        // `next`: the version after each record among those read (`lead`), so the last
        // record of a page cut short by the limit or the budget knows more follows. The
        // window runs over at most `limit + 1` rows, in the order the index gives them.
        let rows = try await pool.execute("""
            SELECT u.counter, u.horizon, u.lost, r.next, r.collection, r.record_id, r.version, r.deleted, r.data,
                   r.updated_at, r.updated_by, r.write_clock, r.other_clock, r.visibility, r.public_id, r.can_fork, r.published_at, r.forked_from
            FROM (SELECT coalesce(\(space)::uuid, (SELECT space_id FROM spaces WHERE personal_of = \(user))) AS id) s
            CROSS JOIN LATERAL (SELECT coalesce(max(counter), 0) AS counter, coalesce(max(purge_horizon), 0) AS horizon,
                  EXISTS (SELECT 1 FROM cursor_gaps g WHERE g.space_id = s.id AND \(since) > g.after AND \(since) < g.before) AS lost
                  FROM space_counters WHERE space_id = s.id) u
            LEFT JOIN LATERAL (
              SELECT * FROM (
                SELECT r.*, lead(r.version) OVER w AS next, sum(r.data_bytes) OVER w - r.data_bytes AS before
                FROM (
                  SELECT collection, record_id, version, deleted, data, updated_at, updated_by,
                         write_clock, greatest(delete_clock COLLATE "C", visibility_clock) AS other_clock, visibility, public_id,
                         can_fork, published_at, forked_from, data_bytes
                  FROM records r
                  WHERE r.space_id = s.id AND r.version > \(since) AND NOT (\(since) > 0 AND \(since) < u.horizon)
                    AND \(sql: BackendRecordStore.holdsData)
                    AND (\(collections == nil) OR r.collection = ANY(\(collections ?? [])))
                  ORDER BY r.version LIMIT \(limit + 1)
                ) r
                WINDOW w AS (ORDER BY r.version ROWS UNBOUNDED PRECEDING)
              ) r
              WHERE r.before < \(pageBudget)
              ORDER BY r.version
            ) r ON true
            """)
        guard let first = rows.first else { throw UnexpectedAnswer("the pull returned no row") }
        let (counter, horizon, lost) = try first.decode((Int64, Int64, Bool).self)
        // Older than what purge kept, lost by a restore from a backup, or ahead of anything
        // this space holds (its data was restored to an earlier point): pull from the start.
        if (since > 0 && since < horizon) || lost || since > counter { return .resyncRequired }
        let records = first.isNull(at: Self.record + 2) ? rows.prefix(0) : rows.prefix(limit)
        // The answer's size, known before writing it: the data as stored and what a record's
        // other fields take at most, usually (so a page of large records is one allocation).
        let expected = records.reduce(64) { $0 + 400 + $1.withBytes(at: Self.record + 4) { $0?.count ?? 0 } }
        var page = PulledPageWriter(form: form, expectedBytes: expected)
        if let head = records.first { try PulledPageWriter.check(head, from: Self.record) }
        for row in records { try page.append(row, from: Self.record) }
        // More follows when the limit or the budget cut the page short.
        let last = records.last
        let hasMore = last.map { rows.count > limit || !$0.isNull(at: 3) } ?? false
        let cursor = hasMore ? try last?.decode(Int64.self, at: Self.record + 2) ?? since : max(since, counter)
        return .page(page.finish(cursor: String(cursor), hasMore: hasMore))
    }

    /// The column a page's record starts at.
    private static let record = 4

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
    public func streamStart(user: UserID, space: SpaceID?) async throws -> StreamStart? {
        try await reads.primary.withConnection { connection in
            let main = try (space ?? SpaceStore.personalSpace(connection, user: user)).description
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
