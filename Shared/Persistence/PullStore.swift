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

    public func pull(user: String, since: Int64, limit: Int, collections: [String]?) async throws -> Outcome {
        try await pool.withConnection { connection in
            let horizon = try connection.query(
                "SELECT purge_horizon FROM user_counters WHERE user_id = $1", [user]
            ).first?.optionalInt("purge_horizon") ?? 0
            if since < horizon && since > 0 { return .resyncRequired }
            var sql = """
                SELECT collection, record_id, version, deleted, data, syncline_rfc3339(updated_at) AS updated_at,
                       updated_by FROM records WHERE user_id = $1 AND version > $2
                """
            var parameters: [(any PGBindable)?] = [user, since, limit + 1]
            if let collections {
                sql += " AND collection = ANY($4::text[])"
                parameters.append(collections)
            }
            sql += " ORDER BY version LIMIT $3"
            let rows = try connection.query(sql, parameters).rows
            let changes = try rows.prefix(limit).map { row in
                let deleted = try row.bool("deleted")
                return RecordView(
                    collection: try row.string("collection"), id: try row.string("record_id"),
                    version: try row.int("version"), deleted: deleted,
                    data: deleted ? nil : try JSONParser.parse(try row.string("data")).objectValue,
                    updatedAt: row["updated_at"], updatedBy: row["updated_by"])
            }
            let cursor = changes.last.map { String($0.version) } ?? String(since)
            return .page(PullPage(changes: changes, cursor: cursor, hasMore: rows.count > limit))
        }
    }

    /// The user's cursor now: a stream's `hello`.
    public func currentCursor(user: String) async throws -> String {
        let counter = try await pool.query("SELECT counter FROM user_counters WHERE user_id = $1", [user]).first?.optionalInt("counter")
        return String(counter ?? 0)
    }
}
