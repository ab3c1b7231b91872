import Foundation
import PQBridge
import Persistence
import SyncModels
import Testing

/// Every read of the support console is an index lookup or a bounded index range: each
/// statement's plan, over a space of 200,000 records and 20,000 jobs beside 5,000 other
/// spaces with 100,000 jobs, scans no table whole. (Their times at 1,000,000 records are in docs/BENCHMARKS.md.)
@Suite("Support console plans", .enabled(if: TestEnvironment.hasServers), .serialized, .timeLimit(.minutes(3)))
struct SupportQueryPlanTests {
    @Test func noReadOfTheConsoleScansATableWhole() async throws {
        try await withPool { pool in
            _ = try await Migrations.apply(on: pool, logger: TestEnvironment.logger)
            let user = UserID.unique("plans")
            let space = SpaceID.random()
            let other = "plans-\(space)-other-"
            let device = try await DeviceStore(pool: pool).register(user: user, name: "iPad", platform: "ios", pushURL: nil, pushSecret: "s")
            let deviceID = try #require(DeviceID(device.deviceID))
            try await pool.execute("INSERT INTO spaces (space_id, name) VALUES (\(space), 'plans')")
            try await pool.execute("INSERT INTO space_members (space_id, user_id, role) VALUES (\(space), \(user), 'owner')")
            try await pool.execute("INSERT INTO space_counters (space_id, counter) VALUES (\(space), 200000)")
            try await pool.execute("""
                INSERT INTO records (space_id, collection, record_id, version, deleted, data, write_clock, created_by)
                SELECT \(space), CASE WHEN i % 10 = 0 THEN 'notes' ELSE 'tasks' END, 'r' || i, i, i % 50 = 0,
                       jsonb_build_object('title', 'task ' || i, 'done', i % 3 = 0),
                       lpad((1700000000000 + i)::text, 13, '0') || '-00000-node ' || gen_random_uuid(), \(user)
                FROM generate_series(1, 200000) i
                """)
            try await pool.execute("""
                INSERT INTO jobs (job_id, user_id, device_id, space_id, status, ops, op_count, results, trace_id)
                SELECT gen_random_uuid(), \(user), \(deviceID), \(space), 'succeeded',
                       jsonb_build_array(jsonb_build_object('op_id', gen_random_uuid(), 'type', 'patch', 'collection', 'tasks',
                         'id', 'r' || (j * 7 % 200000), 'data', jsonb_build_object('done', true))),
                       1, '[{"status":"applied","version":1}]', '00-' || md5(j::text) || '-00f067aa0ba902b7-01'
                FROM generate_series(1, 20000) j
                """)
            try await pool.execute("""
                INSERT INTO job_records (space_id, job_id, records)
                SELECT space_id, job_id, ARRAY[space_id || '/' || (ops -> 0 ->> 'collection') || '/' || (ops -> 0 ->> 'id')]
                FROM jobs WHERE space_id = \(space)
                """)
            // Other spaces, as a deployment has them, with their counters and jobs.
            try await pool.execute("""
                INSERT INTO spaces (space_id, name) SELECT gen_random_uuid(), \(other) || i FROM generate_series(1, 5000) i
                """)
            try await pool.execute("""
                INSERT INTO space_counters (space_id, counter) SELECT space_id, 10 FROM spaces WHERE starts_with(name, \(other))
                """)
            try await pool.execute("""
                INSERT INTO jobs (job_id, user_id, device_id, space_id, status, ops, op_count)
                SELECT gen_random_uuid(), \(user), \(deviceID), s.space_id, 'succeeded',
                       jsonb_build_array(jsonb_build_object('op_id', gen_random_uuid(), 'type', 'delete', 'collection', 'tasks', 'id', 'r' || j)),
                       1
                FROM spaces s CROSS JOIN generate_series(1, 20) j WHERE starts_with(s.name, \(other))
                """)
            try await pool.execute("""
                INSERT INTO job_records (space_id, job_id, records)
                SELECT j.space_id, j.job_id, ARRAY[j.space_id || '/' || (j.ops -> 0 ->> 'collection') || '/' || (j.ops -> 0 ->> 'id')]
                FROM jobs j JOIN spaces s ON s.space_id = j.space_id WHERE starts_with(s.name, \(other))
                """)
            for table in ["spaces", "space_counters", "devices"] { try await pool.execute("ANALYZE \(sql: table)") }
            try await pool.execute("ANALYZE records")
            try await pool.execute("ANALYZE jobs")
            try await pool.execute("ANALYZE job_records")

            let browse = try DataQuery(json: ["collection": "tasks", "limit": 25])
            let statements: [(String, PGQuery)] = [
                ("user", SupportStore.userQuery(user)),
                ("device", SupportStore.deviceQuery(deviceID)),
                ("space", SupportStore.spaceQuery(space)),
                ("records", BackendRecordStore.queryStatement(space: space, browse, idOrder: .index)),
                ("clocks", SupportStore.clocksQuery(space: space, collection: "tasks", ids: ["r1", "r2", "r3"])),
                ("history", SupportStore.historyQuery(space: space, collection: "tasks", id: "r7", limit: 50)),
                ("why", SupportStore.factsQuery(device: deviceID, space: space, collection: "tasks", id: "r7")),
                ("job by trace", SupportStore.jobByTraceQuery("a1d0c6e83f027327d8461063f4ac58a6")),  // md5('42')
            ]
            for (name, statement) in statements {
                let scans = try await Self.fullScans(pool, statement, settings: ["space", "history"].contains(name) ? SupportStore.indexedOnly : nil)
                let plan = scans.isEmpty ? "" : try await Self.plan(pool, statement)
                #expect(scans.isEmpty, "\(name) scans \(scans) whole: \(plan)")
            }
            try await pool.execute("DELETE FROM jobs WHERE space_id = \(space) OR space_id IN (SELECT space_id FROM spaces WHERE starts_with(name, \(other)))")
            try await pool.execute("DELETE FROM records WHERE space_id = \(space)")
            try await pool.execute("DELETE FROM spaces WHERE space_id = \(space) OR starts_with(name, \(other))")
        }
    }

    /// The statement's plan as text, to read when it is not the one expected.
    static func plan(_ pool: PGPool, _ statement: PGQuery) async throws -> String {
        try await pool.execute(PGQuery(unsafeSQL: "EXPLAIN " + statement.sql, binds: statement.binds))
            .map { try $0.decode(String.self, at: 0) }.joined(separator: "\n")
    }

    /// The tables this test fills as a deployment does: a scan of another table (a device's
    /// handful of rows here) is PostgreSQL's right choice for its size in the test.
    static let filled: Set = ["records", "jobs", "job_records", "spaces", "space_counters"]

    /// The filled tables the statement's plan reads with a sequential scan.
    static func fullScans(_ pool: PGPool, _ statement: PGQuery, settings: String? = nil) async throws -> [String] {
        let explain = PGQuery(unsafeSQL: "EXPLAIN (FORMAT JSON) " + statement.sql, binds: statement.binds)
        let text = try #require(try await pool.transaction { connection -> String? in
            if let settings { try connection.execute(PGQuery(stringLiteral: settings)) }
            return try connection.execute(explain).first?.decode(String.self, at: 0)
        })
        var scans: [String] = []
        func walk(_ node: JSONValue) {
            if let fields = node.objectValue {
                if fields["Node Type"]?.stringValue == "Seq Scan", let table = fields["Relation Name"]?.stringValue,
                   Self.filled.contains(table)
                {
                    scans.append(table)
                }
                fields.values.forEach(walk)
            } else if let items = node.arrayValue {
                items.forEach(walk)
            }
        }
        walk(try JSONParser.parse(text))
        return scans
    }
}
