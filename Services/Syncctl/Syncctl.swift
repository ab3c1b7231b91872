import ArgumentParser
import Auth
import Foundation
import Logging
import PQBridge
import Persistence
import ServiceSupport
import SyncModels

/// The `syncctl` command (its own executable, or `syncline syncctl` in the container image).
public enum SyncctlMain {
    public static func run(arguments: [String]) async { await Syncctl.main(arguments) }
}

struct Syncctl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "syncctl",
        abstract: "Operate a Syncline deployment.",
        subcommands: [
            Migrate.self, Token.self, Jobs.self, DeadLetters.self, Queues.self, Users.self, Topology.self, Blobs.self, RulesCommand.self,
            ServiceTokens.self, Feeds.self, Export.self, Import.self, Restored.self,
        ])
}

/// Shared by the subcommands that talk to PostgreSQL.
func withPool<T: Sendable>(_ body: (PGPool, Logger) async throws -> T) async throws -> T {
    let configuration = try Configuration.fromEnvironment()
    let logger = Observability.bootstrap(service: "syncctl", level: configuration.logLevel, format: configuration.logFormat)
    // No statement_timeout: a migration may rewrite a large table.
    let pool = configuration.primaryPool(size: 1, logger: logger, statementTimeout: nil)
    do {
        let value = try await body(pool, logger)
        await pool.shutdown()
        return value
    } catch {
        await pool.shutdown()
        throw error
    }
}

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Apply database migrations (safe to run concurrently).")

    func run() async throws {
        let applied = try await withPool { pool, logger in try await Migrations.apply(on: pool, logger: logger) }
        print(applied.isEmpty ? "schema is up to date" : "applied migrations: \(applied.map(String.init).joined(separator: ", "))")
    }
}

struct Token: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Mint an HS256 token signed with JWT_SECRET.")

    @Option(help: "The user id (the token's sub).") var user: String
    @Flag(help: "Give the token role: admin.") var admin = false
    @Flag(help: "Give the token scope: support (with --admin: the support console shows record data).") var support = false
    @Option(help: "Lifetime, e.g. 1h, 30m, 7d.") var ttl = "1h"
    @Option(help: "Display name (the name claim).") var name: String?

    func run() async throws {
        let configuration = try Configuration.fromEnvironment()
        let signer = try await TokenMinter(secret: try configuration.requireJWTSecret())
        guard let seconds = Durations.parse(ttl), seconds > 0 else { throw ValidationError("--ttl must be a duration such as 1h") }
        let claims = Claims(
            sub: user, exp: Int64(Date().timeIntervalSince1970 + seconds), role: admin ? "admin" : nil, name: name,
            scope: support ? "support" : nil)
        print(try await signer.sign(claims))
    }
}

struct Jobs: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Inspect jobs.", subcommands: [Show.self])

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show one job (any user) as JSON.")

        @Argument(help: "The job id.") var id: String

        func run() async throws {
            guard let job = JobID(id), let found = try await withPool({ pool, _ in try await JobStore(pool: pool).view(job: job) }) else {
                throw ValidationError("no job \(id)")
            }
            struct Shown: Encodable {
                let user_id: UserID
                let job: JobView
            }
            try printJSON(Shown(user_id: found.user, job: found.job))
        }
    }
}
