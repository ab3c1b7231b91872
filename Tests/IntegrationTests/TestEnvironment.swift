import Foundation
import Logging
import PQBridge
import TestSupport
import Testing

/// Runs `body` with a pool of `size` connections to the test database (or to `url`), shut
/// down after.
func withPool<T>(size: Int = 2, url: String? = nil, _ body: (PGPool) async throws -> T) async throws -> T {
    let pool = PGPool(url: url ?? TestEnvironment.databaseURL!, size: size, logger: TestEnvironment.logger)
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
    static var hasServers: Bool { databaseURL != nil && amqpURL != nil }

    static let logger: Logger = {
        var logger = Logger(label: "tests")
        logger.logLevel = .warning
        return logger
    }()
}
