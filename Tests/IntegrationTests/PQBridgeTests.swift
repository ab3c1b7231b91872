import Foundation
import Logging
import PQBridge
import TestSupport
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
    /// A request that waits over a second for a connection is logged as a warning, and the
    /// connection held that long as info: such waits stall every request behind them.
    @Test func aLongWaitForAConnectionIsLogged() async throws {
        let lines = LogLines()
        var logger = Logger(label: "pool") { _ in lines }
        logger.logLevel = .info
        let pool = PGPool(url: TestEnvironment.databaseURL!, size: 1, logger: logger)
        // Held 2 s: the second caller waits over a second even when it starts late on a
        // busy machine.
        async let holder: Void = { _ = try await pool.execute("SELECT pg_sleep(2)") }()
        try await Task.sleep(for: .milliseconds(200))
        _ = try await pool.execute("SELECT 1")
        try await holder
        await pool.shutdown()
        let logged = lines.messages
        func seconds(_ prefix: String) -> Double? {
            logged.first { $0.hasPrefix(prefix) }.flatMap { Double($0.dropFirst(prefix.count).prefix { $0 != " " }) }
        }
        #expect(seconds("warning waited for a database connection seconds=").map { $0 >= 1 } == true, "\(logged)")
        #expect(seconds("info held a database connection seconds=").map { $0 >= 1.9 } == true, "\(logged)")
        #expect(logged.filter { $0.contains("database connection") }.count == 2, "\(logged)")
    }

    @Test func injectionIsJustText() async throws {
        try await withPool { pool in
            let evil = "x'); DROP TABLE jobs; --"
            let row = try await pool.execute("SELECT \(evil)::text").first
            #expect(try row?.decode(String.self, at: 0) == evil)
        }
    }

    @Test func serverErrorsCarrySQLStateAndClassification() async throws {
        try await withPool { pool in
            do {
                try await pool.execute("SELECT 1/0")
                Issue.record("division by zero should fail")
            } catch let error as PGError {
                #expect(error.code == .server)
                #expect(error.sqlState == "22012")
                #expect(!error.isRetryable)
            }
            do {
                try await pool.execute("DO $$ BEGIN RAISE EXCEPTION 'boom' USING ERRCODE = '40001'; END $$")
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
            try await pool.execute("CREATE TABLE \(sql: table) (v int PRIMARY KEY)")
            do {
                try await pool.transaction { connection in
                    try connection.execute("INSERT INTO \(sql: table) VALUES (1)")
                    try connection.execute("INSERT INTO \(sql: table) VALUES (1)")  // unique violation
                }
                Issue.record("duplicate key should fail")
            } catch let error as PGError {
                #expect(error.sqlState == "23505")
            }
            let count = try await pool.execute("SELECT count(*) FROM \(sql: table)").first?.decode(Int.self, at: 0)
            #expect(count == 0)
            // The connection is usable again after the rollback.
            try await pool.execute("DROP TABLE \(sql: table)")
        }
    }

    /// A transaction's BEGIN goes with its first statement and, with `executeThenCommit`,
    /// its COMMIT with its last: the statements still run in one transaction, what the last
    /// one returns comes back once committed, and others see all of it.
    @Test func aPipelinedTransactionIsOneTransactionCommittedWithItsLastStatement() async throws {
        try await withPool(size: 1) { pool in
            let table = "bridge_pipe_\(UInt32.random(in: 0...UInt32.max))"
            try await pool.execute("CREATE TABLE \(sql: table) (v int PRIMARY KEY, tx int8)")
            let returned = try await pool.transaction { connection in
                try connection.execute("INSERT INTO \(sql: table) VALUES (1, txid_current())")
                return try connection.executeThenCommit(
                    "INSERT INTO \(sql: table) VALUES (2, txid_current()) RETURNING v"
                ).first?.decode(Int.self, at: 0)
            }
            #expect(returned == 2)
            try await withPool(size: 1) { other in
                let rows = try await other.execute("SELECT count(*), count(DISTINCT tx) FROM \(sql: table)")
                #expect(try rows[0].decode((Int, Int).self) == (2, 1))
            }
            // The connection is out of the transaction and of pipeline mode.
            let next = try await pool.transaction { try $0.executeThenCommit("SELECT 7").first?.decode(Int.self, at: 0) }
            #expect(next == 7)
            try await pool.execute("DROP TABLE \(sql: table)")
        }
    }

    /// Whether the first statement (sent with BEGIN), the last (sent with COMMIT) or the
    /// COMMIT itself fails, the error comes back with its SQLSTATE, nothing stays, and the
    /// connection is usable at once.
    @Test func aPipelinedTransactionThatFailsAnywhereLeavesNothing() async throws {
        try await withPool(size: 1) { pool in
            let table = "bridge_pipefail_\(UInt32.random(in: 0...UInt32.max))"
            try await pool.execute("""
                CREATE TABLE \(sql: table) (v int, CONSTRAINT unique_v UNIQUE (v) DEFERRABLE INITIALLY DEFERRED)
                """)
            try await pool.execute("INSERT INTO \(sql: table) VALUES (1)")
            let failures: [(String, @Sendable (PGConnection) throws -> Void)] = [
                ("the first statement", { connection in
                    try connection.execute("SELECT 1 / (v - 1) FROM \(sql: table)")
                    try connection.execute("INSERT INTO \(sql: table) VALUES (5)")
                }),
                ("the last statement", { connection in
                    try connection.execute("INSERT INTO \(sql: table) VALUES (5)")
                    try connection.executeThenCommit("SELECT 1 / (v - 1) FROM \(sql: table) WHERE v = 1")
                }),
                ("the commit", { connection in
                    try connection.execute("INSERT INTO \(sql: table) VALUES (5)")
                    try connection.executeThenCommit("INSERT INTO \(sql: table) VALUES (1)")  // checked at COMMIT
                }),
            ]
            for (place, body) in failures {
                do {
                    try await pool.transaction(body)
                    Issue.record("a transaction failing in \(place) succeeded")
                } catch let error as PGError {
                    #expect(error.sqlState == (place == "the commit" ? "23505" : "22012"), "\(place): \(error)")
                }
                let values = try await pool.execute("SELECT array_agg(v ORDER BY v) FROM \(sql: table)")
                #expect(try values[0].decode([Int].self, at: 0) == [1], "\(place)")
            }
            try await pool.execute("DROP TABLE \(sql: table)")
        }
    }

    /// A transaction that runs no statement sends none (no empty BEGIN and COMMIT); a
    /// script run inside one is part of it.
    @Test func aTransactionSendsBeginOnlyWithAStatement() async throws {
        try await withPool(size: 1) { pool in
            let empty = try await pool.transaction { _ in 5 }
            #expect(empty == 5)
            let table = "bridge_script_\(UInt32.random(in: 0...UInt32.max))"
            do {
                try await pool.transaction { connection in
                    try connection.executeScript("CREATE TABLE \(table) (v int); INSERT INTO \(table) VALUES (1);")
                    try connection.execute("SELECT 1 / 0")
                }
                Issue.record("a division by zero succeeded")
            } catch let error as PGError {
                #expect(error.sqlState == "22012")
            }
            let exists = try await pool.execute("SELECT to_regclass(\(table)) IS NOT NULL")
            #expect(try exists[0].decode(Bool.self, at: 0) == false)
        }
    }

    @Test func poolServesMoreCallersThanConnections() async throws {
        try await withPool(size: 2) { pool in
            let start = Date()
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<6 { group.addTask { try await pool.execute("SELECT pg_sleep(0.2)") } }
                try await group.waitForAll()
            }
            let elapsed = Date().timeIntervalSince(start)
            #expect(elapsed >= 0.55 && elapsed < 3, "6 × 0.2 s on 2 connections took \(elapsed) s")
        }
    }

    @Test func reconnectsAfterServerRestart() async throws {
        let server = try OutageProxy(for: TestEnvironment.databaseURL!)
        defer { server.close() }
        try await withPool(size: 2, url: server.routing(TestEnvironment.databaseURL!)) { pool in
            #expect(try await pool.execute("SELECT 1").first?.decode(Int32.self, at: 0) == 1)
            server.cut()
            try server.restore()
            var errors: [any Error] = []
            let row = try await eventually(within: 30, "a statement after the restart") {
                do {
                    return try await pool.execute("SELECT 2").first?.decode(Int32.self, at: 0)
                } catch {
                    errors.append(error)
                    throw error
                }
            }
            #expect(row == 2)
            for error in errors {
                #expect((error as? PGError)?.isRetryable == true, "\(error)")
            }
        }
    }

    /// Cancelling the task cancels the statement on the server (not only the wait for
    /// it), and the connection is usable at once.
    @Test func aCancelledStatementEndsOnTheServerAndLeavesTheConnectionUsable() async throws {
        try await withPool(size: 1) { pool in
            let started = ContinuousClock.now
            let sleeper = Task { try await pool.execute("SELECT pg_sleep(20)") }
            try await Task.sleep(for: .milliseconds(300))
            sleeper.cancel()
            let outcome = await sleeper.result
            #expect(ContinuousClock.now - started < .seconds(3), "the statement ran on after the cancel")
            guard case .failure(let error as PGError) = outcome else {
                Issue.record("a cancelled statement answered \(outcome)")
                return
            }
            #expect(error.sqlState == "57014" || error.code == .cancelled, "\(error)")
            let rows = try await pool.execute("""
                SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%' AND state = 'active'
                """)
            #expect(try rows[0].decode(Int64.self, at: 0) == 0)
        }
    }

    /// A transaction whose task is cancelled between two statements sends no more of them
    /// and is rolled back: nothing it wrote stays, and the connection is not left inside it.
    @Test func aCancelledTransactionRollsBackAndSendsNothingMore() async throws {
        try await withPool(size: 1) { pool in
            _ = try await pool.execute("CREATE TABLE IF NOT EXISTS cancel_probe (n int8)")
            _ = try await pool.execute("TRUNCATE cancel_probe")
            let writer = Task {
                try await pool.transaction { connection in
                    try connection.execute("INSERT INTO cancel_probe VALUES (\(Int64(1)))")
                    Thread.sleep(forTimeInterval: 0.6)  // the cancel lands here, between statements
                    try connection.execute("INSERT INTO cancel_probe VALUES (\(Int64(2)))")
                }
            }
            try await Task.sleep(for: .milliseconds(200))
            writer.cancel()
            let outcome = await writer.result
            guard case .failure(let error as PGError) = outcome else {
                Issue.record("a cancelled transaction answered \(outcome)")
                return
            }
            #expect(error.code == .cancelled, "\(error)")
            let rows = try await pool.execute("SELECT count(*) FROM cancel_probe")
            #expect(try rows[0].decode(Int64.self, at: 0) == 0)
            // Outside any transaction: what it writes now is committed, seen from elsewhere.
            _ = try await pool.execute("INSERT INTO cancel_probe VALUES (\(Int64(3)))")
            try await withPool(size: 1) { other in
                let seen = try await other.execute("SELECT n FROM cancel_probe")
                #expect(try seen.map { try $0.decode(Int64.self, at: 0) } == [3])
            }
            _ = try await pool.execute("DROP TABLE cancel_probe")
        }
    }

    /// A caller waits for a free connection at most the acquisition timeout (the pool's
    /// timer runs in its `run()`), and a cancelled caller stops waiting at once; neither
    /// disturbs the pool.
    @Test func waitingForAConnectionTimesOutOrIsCancelled() async throws {
        let pool = PGPool(
            url: TestEnvironment.databaseURL!, size: 1, logger: TestEnvironment.logger,
            acquisitionTimeout: .milliseconds(500))
        let running = Task { try await pool.run() }
        let holder = Task { try await pool.execute("SELECT pg_sleep(3)") }
        try await Task.sleep(for: .milliseconds(200))
        let started = ContinuousClock.now
        await #expect(throws: PGError.self) { try await pool.execute("SELECT 1") }
        let waited = ContinuousClock.now - started
        #expect(waited >= .milliseconds(450) && waited < .milliseconds(1500), "waited \(waited)")
        do {
            _ = try await pool.execute("SELECT 1")
            Issue.record("a second wait did not time out")
        } catch let error as PGError {
            #expect(error.code == .timeout && error.isUnavailable, "\(error)")
        }
        let waiter = Task { try await pool.execute("SELECT 1") }
        try await Task.sleep(for: .milliseconds(100))
        waiter.cancel()
        let cancelledAt = ContinuousClock.now
        if case .failure(let error as PGError) = await waiter.result {
            #expect(error.code == .cancelled, "\(error)")
        } else {
            Issue.record("a cancelled waiter got a connection")
        }
        #expect(ContinuousClock.now - cancelledAt < .milliseconds(200))
        // Waits that began at different times each end at their own deadline, and one
        // served in between leaves the others' deadlines as they were.
        let waits = try await withThrowingTaskGroup(of: Duration.self) { group in
            for delay in [0, 300] {
                group.addTask {
                    try await Task.sleep(for: .milliseconds(delay))
                    let started = ContinuousClock.now
                    _ = try? await pool.execute("SELECT 1")
                    return ContinuousClock.now - started
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(waits.allSatisfy { $0 >= .milliseconds(450) && $0 < .milliseconds(1000) }, "waited \(waits)")
        _ = try await holder.value
        let rows = try await pool.execute("SELECT 7")
        #expect(try rows[0].decode(Int64.self, at: 0) == 7)
        running.cancel()  // run() ends, and closes the pool
        try await running.value
        await #expect(throws: PGError.self) { try await pool.execute("SELECT 1") }
    }

    /// With a standby wait, a transaction returns only once a standby holds its commit: on
    /// a server with none it is refused after the wait as unconfirmed — an outage, which
    /// the gateway answers 503 and a worker hands back — though committed. Without a wait
    /// the same server's commit suffices.
    @Test func aCommitNoStandbyHoldsIsRefusedAfterTheWait() async throws {
        let pool = PGPool(
            url: TestEnvironment.databaseURL!, size: 1, logger: TestEnvironment.logger, standbyWait: .milliseconds(300))
        let marker = UUID().uuidString
        let started = ContinuousClock.now
        do {
            _ = try await pool.transaction { try $0.execute("SELECT set_config('application_name', \(marker), false), txid_current()") }
            Issue.record("a commit was confirmed by a server without standbys")
        } catch let error as PGError {
            #expect(error.code == .unconfirmed && error.isUnavailable, "\(error)")
        }
        let waited = ContinuousClock.now - started
        #expect(waited >= .milliseconds(300) && waited < .seconds(3), "waited \(waited)")
        // The connection was closed (it may be a former primary): the next is a new one.
        let name = try await pool.execute("SELECT current_setting('application_name')")[0].decode(String.self, at: 0)
        #expect(name != marker)
        await pool.shutdown()

        let plain = PGPool(url: TestEnvironment.databaseURL!, size: 1, logger: TestEnvironment.logger)
        _ = try await plain.transaction { try $0.execute("SELECT txid_current()") }
        await plain.shutdown()
    }

    /// PostgreSQL's statement_timeout, set on every connection, ends a statement that runs
    /// too long.
    @Test func theStatementTimeoutEndsALongStatement() async throws {
        let pool = PGPool(
            url: TestEnvironment.databaseURL!, size: 1, logger: TestEnvironment.logger,
            statementTimeout: .milliseconds(300))
        let started = ContinuousClock.now
        do {
            _ = try await pool.execute("SELECT pg_sleep(5)")
            Issue.record("pg_sleep(5) outlived a 300 ms statement_timeout")
        } catch let error as PGError {
            #expect(error.sqlState == "57014", "\(error)")
        }
        #expect(ContinuousClock.now - started < .seconds(2))
        let rows = try await pool.execute("SHOW statement_timeout")
        #expect(try rows[0].decode(String.self, at: 0) == "300ms")
        await pool.shutdown()
    }

    /// Run as a service, the pool checks idle connections: after a server restart its
    /// dropped connections are found and closed by the check, so the next query succeeds
    /// at the first try. A pool that does not check finds out on the query, which fails.
    @Test func healthChecksFindConnectionsTheServerDropped() async throws {
        let server = try OutageProxy(for: TestEnvironment.databaseURL!)
        defer { server.close() }
        let url = server.routing(TestEnvironment.databaseURL!)
        let checked = PGPool(url: url, size: 2, logger: TestEnvironment.logger, healthCheckInterval: .milliseconds(200))
        let unchecked = PGPool(url: url, size: 1, logger: TestEnvironment.logger)
        let service = Task { try await checked.run() }
        // Both connections of the checked pool open, then go idle.
        async let first = checked.execute("SELECT pg_sleep(0.1)")
        async let second = checked.execute("SELECT pg_sleep(0.1)")
        _ = try await (first, second)
        _ = try await unchecked.execute("SELECT 1")
        server.cut()
        try server.restore()
        try await Task.sleep(for: .seconds(1))  // several checks
        await #expect(throws: PGError.self) { try await unchecked.execute("SELECT 1") }
        async let third = checked.execute("SELECT 3")
        async let fourth = checked.execute("SELECT 4")
        let (three, four) = try await (third, fourth)
        #expect(try three[0].decode(Int32.self, at: 0) == 3 && four[0].decode(Int32.self, at: 0) == 4)
        service.cancel()
        _ = await service.result
        await #expect(throws: PGError.self) { try await checked.execute("SELECT 1") }  // run() closed it
        await unchecked.shutdown()
    }
}
