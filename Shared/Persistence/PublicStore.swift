import PQBridge
import SyncModels

/// Published records, read without auth, and their view counts. Only what
/// readers can see counts: `visibility` is 'public' (listed) or 'unlisted' (by id only).
/// Listings and records may be read on a replica; views are counted on the primary.
public struct PublicStore: Sendable {
    let reads: ReadPools

    public init(reads: ReadPools) { self.reads = reads }

    public init(pool: PGPool) { self.init(reads: ReadPools(primary: pool)) }

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
        try await reads.read { pool in try await pool.execute(Self.listing(filter, limit: limit, offset: offset)) }.map { row in
            let (publicID, collection, author, publishedAt, viewCount, forkCount, title, description, language, tags) =
                try row.decode((String, String, String?, String, Int64, Int64, String?, String?, String?, [String?]).self)
            return PublicItem(
                publicID: publicID, collection: collection, title: title, description: description, tags: tags.compactMap { $0 },
                language: language, author: author, publishedAt: publishedAt, viewCount: viewCount, forkCount: forkCount)
        }
    }

    /// PostgreSQL's plan for a listing, for operators and the benchmark: which index serves it.
    public func plan(_ filter: Filter, limit: Int) async throws -> [String] {
        let listing = Self.listing(filter, limit: limit, offset: 0)
        let explain = PGQuery(unsafeSQL: "EXPLAIN " + listing.sql, binds: listing.binds)
        return try await reads.read { pool in try await pool.execute(explain) }
            .map { try $0.decode(String.self, at: 0) }
    }

    static func listing(_ filter: Filter, limit: Int, offset: Int) -> PGQuery {
        var binds = PGBinds()
        // A literal: the listing's partial indexes are for this value.
        var conditions = ["visibility = \(PGQuery.literal(RecordState.PublicVisibility.public.rawValue))"]
        if let collection = filter.collection { conditions.append("collection = \(binds.append(collection))") }
        if let tag = filter.tag { conditions.append("public_tags @> ARRAY[\(binds.append(tag))]") }
        if let query = filter.query {
            conditions.append("public_search @@ websearch_to_tsquery('simple'::regconfig, \(binds.append(query)))")
        }
        let sql = """
            SELECT public_id, collection, author, syncline_rfc3339(published_at), view_count, fork_count,
                   syncline_text_field(data, 'title'), syncline_text_field(data, 'description'),
                   syncline_text_field(data, 'language'), syncline_public_tags(data)
            FROM records
            WHERE \(conditions.joined(separator: " AND "))
            ORDER BY records.published_at DESC, records.public_id
            LIMIT \(binds.append(limit)) OFFSET \(binds.append(offset))
            """
        return PGQuery(unsafeSQL: sql, binds: binds)
    }

    /// A public or unlisted record.
    public func record(publicID: String) async throws -> PublicRecord? {
        guard let row = try await reads.read({ pool in try await pool.execute("""
            SELECT public_id, collection, data, author, syncline_rfc3339(published_at), syncline_rfc3339(updated_at),
                   view_count, fork_count, can_fork, forked_from, version
            FROM records WHERE public_id = \(publicID) AND visibility <> \(literal: RecordState.PublicVisibility.private)
            """) }).first else { return nil }
        let (id, collection, data, author, publishedAt, updatedAt, viewCount, forkCount, canFork, forkedFrom, version) =
            try row.decode((String, String, PGJSON, String?, String, String, Int64, Int64, Bool, String?, Int64).self)
        return PublicRecord(
            publicID: id, collection: collection, data: try JSONParser.parse(data.text), author: author,
            publishedAt: publishedAt, updatedAt: updatedAt, viewCount: viewCount, forkCount: forkCount, canFork: canFork,
            forkedFrom: forkedFrom, version: version)
    }

    /// Adds counted views, many public ids in one statement.
    public func addViews(_ views: [String: Int]) async throws {
        guard !views.isEmpty else { return }
        let ids = Array(views.keys)
        try await reads.primary.execute("""
            UPDATE records r SET view_count = r.view_count + v.n
            FROM unnest(\(ids), \(ids.map { Int64(views[$0]!) })) AS v(public_id, n)
            WHERE r.public_id = v.public_id
            """)
    }
}
