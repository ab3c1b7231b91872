import PQBridge
import SyncModels

/// Changes since a cursor (G4: versions come from the per-user counter, taken under a
/// row lock in the applying transaction, so committed versions always form a prefix).
public struct PullStore: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    public enum Outcome: Sendable {
        case page(PullPage)
        /// `since` is older than what purge kept (G7).
        case resyncRequired
    }

    /// One statement, so one snapshot: the user's counter and purge horizon are read with
    /// the page. A page that ends (`has_more: false`) answers the counter as its cursor, which
    /// is at or past the purge horizon (a purged newest tombstone must not leave the device
    /// below it, resyncing forever) and cannot skip a change: every version up to the
    /// counter had committed in this snapshot.
    public func pull(user: String, since: Int64, limit: Int, collections: [String]?) async throws -> Outcome {
        var parameters: [(any PGBindable)?] = [user, since, limit + 1]
        var filter = ""
        if let collections {
            filter = " AND r.collection = ANY($4::text[])"
            parameters.append(collections)
        }
        let rows = try await pool.query("""
            SELECT u.counter, u.horizon, r.collection, r.record_id, r.version, r.deleted, r.data,
                   syncline_rfc3339(r.updated_at) AS updated_at, r.updated_by
            FROM (SELECT coalesce(max(counter), 0) AS counter, coalesce(max(purge_horizon), 0) AS horizon
                  FROM user_counters WHERE user_id = $1) u
            LEFT JOIN LATERAL (
              SELECT * FROM records r
              WHERE r.user_id = $1 AND r.version > $2 AND NOT ($2 > 0 AND $2 < u.horizon)\(filter)
              ORDER BY r.version LIMIT $3
            ) r ON true
            """, parameters).rows
        guard let first = rows.first else { throw PGError(code: .decoding, message: "pull returned no row") }
        let counter = try first.int("counter")
        let horizon = try first.int("horizon")
        if since > 0 && since < horizon { return .resyncRequired }
        let records = rows.filter { $0["version"] != nil }
        let changes = try records.prefix(limit).map { row in
            let deleted = try row.bool("deleted")
            return RecordView(
                collection: try row.string("collection"), id: try row.string("record_id"),
                version: try row.int("version"), deleted: deleted,
                data: deleted ? nil : try JSONParser.parse(try row.string("data")).objectValue,
                updatedAt: row["updated_at"], updatedBy: row["updated_by"])
        }
        let hasMore = records.count > limit
        let cursor = hasMore ? (changes.last?.version ?? since) : max(since, counter)
        return .page(PullPage(changes: changes, cursor: String(cursor), hasMore: hasMore))
    }

    /// The user's cursor now: a stream's `hello`.
    public func currentCursor(user: String) async throws -> String {
        let counter = try await pool.query("SELECT counter FROM user_counters WHERE user_id = $1", [user]).first?.optionalInt("counter")
        return String(counter ?? 0)
    }
}
