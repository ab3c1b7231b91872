import Foundation
import Logging
import PQBridge
import TestSupport
import Testing

/// Runs `body` with a pool of `size` connections to the test database, shut down after.
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

/// Where the real servers are. `scripts/test` always sets these; without them the
/// suites are disabled (and scripts/test fails a run that skipped anything).
enum TestEnvironment {
    static let databaseURL = ProcessInfo.processInfo.environment["DATABASE_URL"]
    static let amqpURL = ProcessInfo.processInfo.environment["AMQP_URL"]
    static let pgCluster = ProcessInfo.processInfo.environment["PG_CLUSTER"]
    static var hasServers: Bool { databaseURL != nil && amqpURL != nil }

    static let logger: Logger = {
        var logger = Logger(label: "tests")
        logger.logLevel = .warning
        return logger
    }()

    static func restartPostgres() throws {
        let cluster = (pgCluster ?? "15/main").replacingOccurrences(of: "/", with: " ")
        #expect(Shell.run("pg_ctlcluster \(cluster) restart -m fast >/dev/null 2>&1") == 0)
    }

    static func rabbitmqctl(_ arguments: String) throws {
        #expect(Shell.run("rabbitmqctl -q \(arguments) >/dev/null 2>&1") == 0)
    }
}
