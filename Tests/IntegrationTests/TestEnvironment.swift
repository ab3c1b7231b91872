import Foundation
import Logging
import PQBridge
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

    /// Runs a shell command and returns its exit status.
    @discardableResult
    static func shell(_ command: String) throws -> Int32 {
        // posix_spawn + waitpid: Foundation's waitUntilExit can hang off the main thread.
        var pid: pid_t = 0
        let arguments: [String] = ["/bin/sh", "-c", command]
        let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let spawned = posix_spawn(&pid, "/bin/sh", nil, nil, argv, environ)
        guard spawned == 0 else { throw POSIXError(POSIXErrorCode(rawValue: spawned) ?? .EINVAL) }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        return (status >> 8) & 0xff
    }

    static func restartPostgres() throws {
        let cluster = (pgCluster ?? "15/main").replacingOccurrences(of: "/", with: " ")
        #expect(try shell("pg_ctlcluster \(cluster) restart -m fast >/dev/null 2>&1") == 0)
    }

    static func rabbitmqctl(_ arguments: String) throws {
        #expect(try shell("rabbitmqctl -q \(arguments) >/dev/null 2>&1") == 0)
    }

    /// Retries `body` until it succeeds or `seconds` pass; returns the errors it saw.
    static func eventually<T>(within seconds: Double, _ body: () async throws -> T) async throws -> (T, [any Error]) {
        let deadline = Date().addingTimeInterval(seconds)
        var errors: [any Error] = []
        while true {
            do {
                return (try await body(), errors)
            } catch {
                errors.append(error)
                if Date() > deadline { throw error }
                try await Task.sleep(for: .milliseconds(200))
            }
        }
    }
}
