import PQBridge
import SyncModels

/// Published records, read without auth (SPEC §5), and their view counts.
public struct PublicStore: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    /// Newest first. A deleted record is never listed.
    public func list(collection: String?, limit: Int, offset: Int) async throws -> [PublicItem] {
        try await pool.query("""
            SELECT public_id, collection, author, syncline_rfc3339(published_at) AS published_at, view_count,
                   CASE WHEN jsonb_typeof(data -> 'title') = 'string' THEN data ->> 'title' END AS title
            FROM records
            WHERE public_id IS NOT NULL AND NOT deleted AND ($1::text IS NULL OR collection = $1)
            ORDER BY published_at DESC, public_id
            LIMIT $2 OFFSET $3
            """, [collection, limit, offset]).rows.map { row in
            PublicItem(
                publicID: try row.string("public_id"), collection: try row.string("collection"), title: row["title"],
                author: row["author"], publishedAt: try row.string("published_at"), viewCount: try row.int("view_count"))
        }
    }

    public func record(publicID: String) async throws -> PublicRecord? {
        guard let row = try await pool.query("""
            SELECT public_id, collection, data, author, syncline_rfc3339(published_at) AS published_at,
                   syncline_rfc3339(updated_at) AS updated_at, view_count, can_fork, version
            FROM records WHERE public_id = $1 AND NOT deleted
            """, [publicID]).first else { return nil }
        return PublicRecord(
            publicID: try row.string("public_id"), collection: try row.string("collection"),
            data: try JSONParser.parse(try row.string("data")), author: row["author"],
            publishedAt: try row.string("published_at"), updatedAt: try row.string("updated_at"),
            viewCount: try row.int("view_count"), canFork: row["can_fork"] == "t", version: try row.int("version"))
    }

    /// Adds counted views, many public ids in one statement.
    public func addViews(_ views: [String: Int]) async throws {
        guard !views.isEmpty else { return }
        let ids = Array(views.keys)
        try await pool.query("""
            UPDATE records r SET view_count = r.view_count + v.n::bigint
            FROM unnest($1::text[], $2::text[]) AS v(public_id, n)
            WHERE r.public_id = v.public_id
            """, [ids, ids.map { String(views[$0]!) }])
    }
}
