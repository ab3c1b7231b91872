import Foundation
import PQBridge
import Persistence
import TestSupport
import Testing

@Suite("First statistics", .enabled(if: TestEnvironment.hasServers), .timeLimit(.minutes(2)))
struct FirstStatisticsTests {
    /// A table the apply reads gets statistics once it holds a thousand rows, not before,
    /// and the look ends once each has them. (In a schema of its own, where the tables go by
    /// the same names, so the shared test database's are left alone.)
    @Test func aTableIsAnalyzedOnceItHoldsRowsAndTheLookEndsWhenAllHaveStatistics() async throws {
        let schema = "first_stats_\(UInt32.random(in: 0...UInt32.max))"
        try await withPool(size: 1) { setup in
            try await setup.execute("CREATE SCHEMA \(sql: schema)")
        }
        let url = TestEnvironment.databaseURL! + "?options=-csearch_path%3D\(schema)"
        try await withPool(size: 1, url: url) { pool in
            for table in ["records", "op_ids", "jobs"] { try await pool.execute("CREATE TABLE \(sql: table) (n int)") }
            let statistics = FirstStatistics(pool: pool)
            try await fill(pool, "records", rows: 1_500)
            try await fill(pool, "op_ids", rows: 10)
            #expect(try await statistics.analyzeGrownTables())
            #expect(try await analyzed(pool) == ["records": 1_500])

            try await fill(pool, "op_ids", rows: 1_000)
            try await fill(pool, "jobs", rows: 1_000)
            #expect(try await statistics.analyzeGrownTables())
            #expect(try await analyzed(pool) == ["records": 1_500, "op_ids": 1_010, "jobs": 1_000])
            #expect(try await statistics.analyzeGrownTables() == false)
            try await pool.execute("DROP SCHEMA \(sql: schema) CASCADE")
        }
    }

    /// Writes `rows` rows and makes the statistics system count them now (it otherwise
    /// gathers a session's counts up to a second later).
    private func fill(_ pool: PGPool, _ table: String, rows: Int) async throws {
        try await pool.execute("INSERT INTO \(sql: table) SELECT generate_series(1, \(Int64(rows)))")
        try await pool.execute("SELECT pg_stat_force_next_flush()")
        try await pool.execute("SELECT 1")
    }

    /// The tables that have statistics, with the rows they counted.
    private func analyzed(_ pool: PGPool) async throws -> [String: Int] {
        let rows = try await pool.execute("""
            SELECT relname::text, reltuples::int8 FROM pg_class
            WHERE relnamespace = current_schema()::regnamespace AND relkind = 'r' AND reltuples >= 0
            """)
        return Dictionary(uniqueKeysWithValues: try rows.map { try $0.decode((String, Int).self) })
    }
}
