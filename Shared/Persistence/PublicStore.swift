import PQBridge
import SyncModels

/// Published records, read without auth (SPEC §5), and their view counts. Only what
/// readers can see counts: `visibility` is 'public' (listed) or 'unlisted' (by id only).
public struct PublicStore: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    /// What the Discover list may be narrowed to.
    public struct Filter: Sendable {
        public var collection: String?
        /// An exact tag of `data.tags`.
        public var tag: String?
        /// Words searched in title, description and tags (web search syntax).
        public var query: String?

        public init(collection: String? = nil, tag: String? = nil, query: String? = nil) {
            self.collection = collection
            self.tag = tag
            self.query = query
        }
    }

    /// Listed records, newest first. Tag and word filters use their own indexes. (The
    /// order names the table's column: the output column of the same name is text, which
    /// no index serves.)
    public func list(_ filter: Filter, limit: Int, offset: Int) async throws -> [PublicItem] {
        let (sql, parameters) = Self.listing(filter, limit: limit, offset: offset)
        return try await pool.query(sql, parameters).rows.map { row in
            let tags = try JSONParser.parse(try row.string("tags")).arrayValue?.compactMap(\.stringValue) ?? []
            return PublicItem(
                publicID: try row.string("public_id"), collection: try row.string("collection"), title: row["title"],
                description: row["description"], tags: tags, language: row["language"], author: row["author"],
                publishedAt: try row.string("published_at"), viewCount: try row.int("view_count"),
                forkCount: try row.int("fork_count"))
        }
    }

    /// PostgreSQL's plan for a listing, for operators and the benchmark: which index serves it.
    public func plan(_ filter: Filter, limit: Int) async throws -> [String] {
        let (sql, parameters) = Self.listing(filter, limit: limit, offset: 0)
        return try await pool.query("EXPLAIN " + sql, parameters).rows.compactMap { $0["QUERY PLAN"] }
    }

    static func listing(_ filter: Filter, limit: Int, offset: Int) -> (String, [(any PGBindable)?]) {
        var conditions = ["visibility = 'public'"]
        var parameters: [(any PGBindable)?] = [limit, offset]
        func bind(_ value: String) -> String {
            parameters.append(value)
            return "$\(parameters.count)"
        }
        if let collection = filter.collection { conditions.append("collection = \(bind(collection))") }
        if let tag = filter.tag { conditions.append("public_tags @> ARRAY[\(bind(tag))::text]") }
        if let query = filter.query {
            conditions.append("public_search @@ websearch_to_tsquery('simple'::regconfig, \(bind(query)))")
        }
        let sql = """
            SELECT public_id, collection, author, syncline_rfc3339(published_at) AS published_at, view_count, fork_count,
                   syncline_text_field(data, 'title') AS title, syncline_text_field(data, 'description') AS description,
                   syncline_text_field(data, 'language') AS language, array_to_json(syncline_public_tags(data))::text AS tags
            FROM records
            WHERE \(conditions.joined(separator: " AND "))
            ORDER BY records.published_at DESC, records.public_id
            LIMIT $1 OFFSET $2
            """
        return (sql, parameters)
    }

    /// A public or unlisted record.
    public func record(publicID: String) async throws -> PublicRecord? {
        guard let row = try await pool.query("""
            SELECT public_id, collection, data, author, syncline_rfc3339(published_at) AS published_at,
                   syncline_rfc3339(updated_at) AS updated_at, view_count, fork_count, can_fork, forked_from, version
            FROM records WHERE public_id = $1 AND visibility <> 'private'
            """, [publicID]).first else { return nil }
        return PublicRecord(
            publicID: try row.string("public_id"), collection: try row.string("collection"),
            data: try JSONParser.parse(try row.string("data")), author: row["author"],
            publishedAt: try row.string("published_at"), updatedAt: try row.string("updated_at"),
            viewCount: try row.int("view_count"), forkCount: try row.int("fork_count"), canFork: row["can_fork"] == "t",
            forkedFrom: row["forked_from"], version: try row.int("version"))
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
