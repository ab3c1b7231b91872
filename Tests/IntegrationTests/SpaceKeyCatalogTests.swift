import PQBridge
import Testing

/// Ready for a database distributed by `space_id` (Citus, docs/SCALING.md): every table
/// that holds a space's data is keyed with `space_id` first, and so is every index on it,
/// so that what a space does routes to one shard. The schema as the migrations leave it
/// is read from PostgreSQL's catalog. What does not follow the rule is listed here, with
/// the reason, as docs/SCALING.md lists it: a new table or index that
/// breaks the rule fails this test, and so does an exception that is no longer needed.
@Suite("Space keys", .enabled(if: TestEnvironment.hasServers))
struct SpaceKeyCatalogTests {
    /// Tables with a `space_id` whose primary key does not start with it: each is
    /// distributed by what its hot statements name instead (docs/SCALING.md).
    static let tablesKeyedOtherwise: Set<String> = [
        // By dead_letter_id: operators' list, by time across spaces, and letters of
        // messages that name no space; it stays on the coordinator.
        "dead_letters",
        // By upload_id, which is its object's id: every PATCH writes the object's rows
        // (`blob_chunks`, by object id) and advances the upload, so the two are co-located
        // by object id and a PATCH stays on one node.
        "blob_uploads",
        // By the code's hash: an invitation is redeemed by its code alone.
        "space_invitations",
        // By device: a device's report of the ops it set aside (an op's space, if any, is
        // what it named); read by device, never on the hot path.
        "set_aside_reports",
    ]

    /// Indexes of space-keyed tables that do not start with `space_id`: reads across spaces.
    static let crossSpaceIndexes: Set<String> = [
        "blobs_by_object", "blobs_unreferenced",  // purge's sweep of unreferenced files
        "jobs_by_id",  // a job named by its id alone: operators, and clients that do not send its space
        "jobs_unpublished",  // the gateway's relay of jobs nobody confirmed publishing
        "jobs_unfinished",  // the backlog's gauge
        "jobs_by_user", "jobs_finished",  // account deletion, and purge of finished jobs
        "records_by_author",  // account deletion
        "records_public_by_tag", "records_public_id_unique", "records_public_listing", "records_public_search",
        "records_reserved_public_ids",  // public reads and purge's release of public ids
        "records_tombstones",  // purge
        "op_ids_by_age",  // purge of old op ids
        "space_members_by_user",  // a user's spaces
        "jobs_by_device", "jobs_by_trace", "device_cursors_by_device",  // the support console: a device's jobs and pulls, a trace id's job
        "job_records_by_record",  // the support console: a record's history (its keys hold the space)
        "spaces_personal_of_key",  // a user's personal space
    ]

    struct Index: Sendable {
        let table: String
        let name: String
        let primary: Bool
        let firstColumn: String
    }

    /// Every index of every table that has a `space_id` column, with its first column.
    static func spaceTableIndexes(_ pool: PGPool) async throws -> [Index] {
        try await pool.execute("""
            SELECT t.relname::text, i.relname::text, x.indisprimary, coalesce(a.attname::text, '(expression)')
            FROM pg_index x
            JOIN pg_class t ON t.oid = x.indrelid
            JOIN pg_class i ON i.oid = x.indexrelid
            JOIN pg_namespace n ON n.oid = t.relnamespace AND n.nspname = current_schema()
            LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = x.indkey[0]
            WHERE EXISTS (SELECT 1 FROM pg_attribute s
                          WHERE s.attrelid = t.oid AND s.attname = 'space_id' AND NOT s.attisdropped)
            ORDER BY 1, 2
            """).map { row in
            let (table, name, primary, first) = try row.decode((String, String, Bool, String).self)
            return Index(table: table, name: name, primary: primary, firstColumn: first)
        }
    }

    @Test func spaceDataIsKeyedAndIndexedBySpaceFirst() async throws {
        let indexes = try await withPool(size: 1) { try await Self.spaceTableIndexes($0) }
        #expect(indexes.contains { $0.table == "records" && $0.primary }, "the catalog query found the schema")

        let primaryKeys = indexes.filter(\.primary)
        let tables = Set(indexes.map(\.table))
        for table in tables {
            #expect(primaryKeys.contains { $0.table == table }, "\(table) has no primary key")
        }
        let keyedOtherwise = Set(primaryKeys.filter { $0.firstColumn != "space_id" }.map(\.table))
        #expect(keyedOtherwise == Self.tablesKeyedOtherwise, """
            tables whose primary key does not start with space_id: \(keyedOtherwise.sorted()); \
            a new one must be keyed (space_id, …), one that now is must leave the list
            """)

        let spaceKeyed = Set(primaryKeys.filter { $0.firstColumn == "space_id" }.map(\.table))
        let crossSpace = Set(indexes.filter { spaceKeyed.contains($0.table) && !$0.primary && $0.firstColumn != "space_id" }.map(\.name))
        #expect(crossSpace == Self.crossSpaceIndexes, """
            indexes of space-keyed tables that do not start with space_id: \(crossSpace.sorted()); \
            a new one must start with space_id, one that now does must leave the list
            """)
    }
}
