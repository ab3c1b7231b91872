import Foundation
import Logging
import PQBridge
import Testing

/// Log lines as `level message key=value…`, kept for a test to read.
final class LogLines: LogHandler, @unchecked Sendable {
    // @unchecked: `stored` is read and written under `lock` only.
    private let lock = NSLock()
    private var stored: [String] = []
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace
    var messages: [String] { lock.withLock { stored } }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let fields = (event.metadata ?? [:]).sorted { $0.key < $1.key }.map { " \($0.key)=\($0.value)" }.joined()
        lock.withLock { stored.append("\(event.level) \(event.message)\(fields)") }
    }
}

@Suite("libpq bridge", .enabled(if: TestEnvironment.hasServers), .serialized, .timeLimit(.minutes(3)))
struct PQBridgeTests {
    func withPool<T>(size: Int = 2, _ body: (PGPool) async throws -> T) async throws -> T {
        let pool = PGPool(url: TestEnvironment.databaseURL!, size: size, logger: TestEnvironment.logger)
        do {
            let value = try await body(pool)
            await pool.shutdown()
            return value
        } catch {
            await pool.shutdown()
            throw error
        }
    }

    @Test func parametersAndTypesRoundTrip() async throws {
        try await withPool { pool in
            let row = try #require(try await pool.query(
                "SELECT $1::int8 AS i, $2::text AS t, $3::bool AS b, $4::float8 AS d, $5::text AS n, $6::text[] AS a",
                [Int64(-42), "héllo 'quoted' \"x\"", true, 2.5, nil, ["a,b", "c\"d", "e\\f"]]).first)
            #expect(try row.int("i") == -42)
            #expect(try row.string("t") == "héllo 'quoted' \"x\"")
            #expect(try row.bool("b"))
            #expect(row["d"] == "2.5")
            #expect(row.isNull("n"))
            #expect(row["a"] == #"{"a,b","c\"d","e\\f"}"#)
        }
    }

    /// A request that waits over a second for a connection is logged as a warning, and the
    /// connection held that long as info: such waits stall every request behind them.
    @Test func aLongWaitForAConnectionIsLogged() async throws {
        let lines = LogLines()
        var logger = Logger(label: "pool") { _ in lines }
        logger.logLevel = .info
        let pool = PGPool(url: TestEnvironment.databaseURL!, size: 1, logger: logger)
        async let holder: Void = { _ = try await pool.query("SELECT pg_sleep(1.3)") }()
        try await Task.sleep(for: .milliseconds(200))
        _ = try await pool.query("SELECT 1")
        try await holder
        await pool.shutdown()
        let logged = lines.messages
        #expect(logged.contains { $0.hasPrefix("warning waited for a database connection seconds=1.") }, "\(logged)")
        #expect(logged.contains { $0.hasPrefix("info held a database connection seconds=1.") }, "\(logged)")
        #expect(logged.filter { $0.contains("database connection") }.count == 2, "\(logged)")
    }

    @Test func injectionIsJustText() async throws {
        try await withPool { pool in
            let evil = "x'); DROP TABLE jobs; --"
            let row = try await pool.query("SELECT $1::text AS v", [evil]).first
            #expect(row?["v"] == evil)
        }
    }

    @Test func serverErrorsCarrySQLStateAndClassification() async throws {
        try await withPool { pool in
            do {
                try await pool.query("SELECT 1/0")
                Issue.record("division by zero should fail")
            } catch let error as PGError {
                #expect(error.code == .server)
                #expect(error.sqlState == "22012")
                #expect(!error.isRetryable)
            }
            do {
                try await pool.query("DO $$ BEGIN RAISE EXCEPTION 'boom' USING ERRCODE = '40001'; END $$")
                Issue.record("should fail")
            } catch let error as PGError {
                #expect(error.sqlState == "40001")
                #expect(error.isRetryable)
            }
        }
    }

    @Test func failedTransactionRollsBack() async throws {
        try await withPool(size: 1) { pool in
            let table = "bridge_tx_\(UInt32.random(in: 0...UInt32.max))"
            try await pool.query("CREATE TABLE \(table) (v int PRIMARY KEY)")
            do {
                try await pool.transaction { connection in
                    try connection.query("INSERT INTO \(table) VALUES (1)")
                    try connection.query("INSERT INTO \(table) VALUES (1)")  // unique violation
                }
                Issue.record("duplicate key should fail")
            } catch let error as PGError {
                #expect(error.sqlState == "23505")
            }
            let count = try await pool.query("SELECT count(*) AS n FROM \(table)").first?["n"]
            #expect(count == "0")
            // The connection is usable again after the rollback.
            try await pool.query("DROP TABLE \(table)")
        }
    }

    @Test func poolServesMoreCallersThanConnections() async throws {
        try await withPool(size: 2) { pool in
            let start = Date()
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<6 { group.addTask { try await pool.query("SELECT pg_sleep(0.2)") } }
                try await group.waitForAll()
            }
            let elapsed = Date().timeIntervalSince(start)
            #expect(elapsed >= 0.55 && elapsed < 3, "6 × 0.2 s on 2 connections took \(elapsed) s")
        }
    }

    @Test func reconnectsAfterServerRestart() async throws {
        try await withPool(size: 2) { pool in
            #expect(try await pool.query("SELECT 1 AS one").first?["one"] == "1")
            try TestEnvironment.restartPostgres()
            let (row, errors) = try await TestEnvironment.eventually(within: 30) {
                try await pool.query("SELECT 2 AS two").first
            }
            #expect(row?["two"] == "2")
            for error in errors {
                #expect((error as? PGError)?.isRetryable == true, "\(error)")
            }
        }
    }
}
