import AMQPBridge
import Auth
import Foundation
import Logging
import PQBridge
import SyncModels

/// Reads settings from the environment: names, defaults and what a bad value says, in one
/// way for every executable. An empty variable counts as unset.
public struct EnvironmentReader: Sendable {
    public let environment: [String: String]

    public init(_ environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.environment = environment
    }

    public func value(_ name: String) -> String? {
        environment[name].flatMap { $0.isEmpty ? nil : $0 }
    }

    public func flag(_ name: String) -> Bool { value(name) == "true" }

    public func int(_ name: String, _ fallback: Int) throws(Configuration.Invalid) -> Int {
        guard let text = value(name) else { return fallback }
        guard let number = Int(text), number > 0 else {
            throw Configuration.Invalid(description: "\(name) must be a positive integer")
        }
        return number
    }

    public func duration(_ name: String, _ fallback: String) throws(Configuration.Invalid) -> Double {
        guard let seconds = Durations.parse(value(name) ?? fallback) else {
            throw Configuration.Invalid(description: "\(name) must be a duration such as 500ms, 5s, 2m, 1h or 30d")
        }
        return seconds
    }

    public func rate(_ name: String, _ fallback: String) throws(Configuration.Invalid) -> RateLimit {
        guard let limit = RateLimit(value(name) ?? fallback) else {
            throw Configuration.Invalid(description: "\(name) must look like 20/s,burst=40 (or 600/m; off disables it)")
        }
        return limit
    }

    public func bytes(_ name: String, _ fallback: String) throws(Configuration.Invalid) -> Int64 {
        guard let bytes = ByteSizes.parse(value(name) ?? fallback) else {
            throw Configuration.Invalid(description: "\(name) must be a size such as 100MiB, 5GiB or a number of bytes")
        }
        return bytes
    }

    /// A comma-separated list, each item trimmed, empty items left out.
    public func list(_ name: String) -> [String] {
        (value(name) ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }
}

/// What more than one executable reads from its environment: where PostgreSQL
/// and RabbitMQ are, tokens, logs, the retry tiers. Each service reads its own settings
/// besides (`WorkerSettings`, `GatewaySettings`, …), with the same reader. Defaults suit
/// local development. Secrets are never logged.
public struct Configuration: Sendable {
    public var databaseURL: String
    public var amqpURL: String
    public var jwtSecret: String?
    public var port: Int
    public var retryDelays: [Double]
    /// Attempts a job (worker) or a webhook delivery (fanout) gets before it is dead-lettered.
    public var maxAttempts: Int
    /// Whether webhook URLs may name private addresses (registration and delivery).
    public var allowPrivateWebhooks: Bool
    public var logLevel: Logger.Level
    public var logFormat: Observability.LogFormat
    /// `SLOW_THRESHOLD`: a request, statement, wait for a connection, publisher confirm or
    /// apply batch that takes longer logs a warning with its trace id.
    public var slowThreshold: Duration
    public var databasePoolSize: Int
    /// `DATABASE_REQUIRE_STANDBY`: how long a commit may wait for a standby to hold it
    /// before the write is refused as unavailable (nil: a commit on the primary suffices).
    public var databaseStandbyWait: Duration?
    /// The identity provider's key set (`JWT_JWKS_URL`) and what its tokens must say.
    public var jwksURL: String?
    public var tokenPolicy: TokenPolicy
    /// `RULES_REFRESH`: how often a gateway looks for a new version of the rules (a worker
    /// reads the version in every apply instead).
    public var rulesRefresh: Duration = .seconds(2)

    public struct Invalid: Error, CustomStringConvertible {
        public let description: String
        public init(description: String) { self.description = description }
    }

    public static func fromEnvironment(
        _ environment: [String: String] = ProcessInfo.processInfo.environment, defaultPort: Int = 8080
    ) throws(Invalid) -> Configuration {
        try read(EnvironmentReader(environment), defaultPort: defaultPort)
    }

    public static func read(_ reader: EnvironmentReader, defaultPort: Int = 8080) throws(Invalid) -> Configuration {
        let delays = (reader.value("RETRY_DELAYS") ?? "1s,5s,25s,2m").split(separator: ",").map { Durations.parse(String($0)) }
        guard !delays.isEmpty, delays.allSatisfy({ ($0 ?? 0) >= 0.001 }) else {
            throw Invalid(description: "RETRY_DELAYS must be a comma-separated list of durations of at least 1ms")
        }
        if let url = reader.value("JWT_JWKS_URL"), JWKSKeySet.Source(url) == nil {
            throw Invalid(description: "JWT_JWKS_URL must be an https URL, an http URL on a loopback address, or a file path")
        }
        let levelText = reader.value("LOG_LEVEL") ?? "info"
        guard let level = Logger.Level(rawValue: levelText.lowercased()) else {
            throw Invalid(description: "LOG_LEVEL must be one of trace, debug, info, notice, warning, error, critical")
        }
        guard let format = Observability.LogFormat(rawValue: (reader.value("LOG_FORMAT") ?? "text").lowercased()) else {
            throw Invalid(description: "LOG_FORMAT must be text or json")
        }
        let rulesRefresh = try reader.duration("RULES_REFRESH", "2s")
        guard rulesRefresh >= 0.05 else { throw Invalid(description: "RULES_REFRESH must be at least 50ms") }
        var configuration = Configuration(
            databaseURL: reader.value("DATABASE_URL") ?? "postgresql://syncline:syncline@127.0.0.1:5432/syncline",
            amqpURL: reader.value("AMQP_URL") ?? "amqp://guest:guest@127.0.0.1:5672/%2f",
            jwtSecret: reader.value("JWT_SECRET"),
            port: try reader.int("PORT", defaultPort),
            retryDelays: delays.compactMap { $0 },
            maxAttempts: try reader.int("MAX_ATTEMPTS", 5),
            allowPrivateWebhooks: reader.flag("ALLOW_PRIVATE_WEBHOOKS"),
            logLevel: level,
            logFormat: format,
            slowThreshold: .milliseconds(Int((try reader.duration("SLOW_THRESHOLD", "1s") * 1000).rounded())),
            databasePoolSize: try reader.int("DATABASE_POOL_SIZE", 8),
            databaseStandbyWait: reader.value("DATABASE_REQUIRE_STANDBY") == nil
                ? nil : .milliseconds(Int((try reader.duration("DATABASE_REQUIRE_STANDBY", "5s") * 1000).rounded())),
            jwksURL: reader.value("JWT_JWKS_URL"),
            tokenPolicy: TokenPolicy(
                userClaim: reader.value("JWT_USER_CLAIM") ?? "sub", adminClaim: reader.value("JWT_ADMIN_CLAIM") ?? "role",
                adminValue: reader.value("JWT_ADMIN_VALUE") ?? "admin",
                supportClaim: reader.value("JWT_SUPPORT_CLAIM") ?? "scope", supportValue: reader.value("JWT_SUPPORT_VALUE") ?? "support",
                issuer: reader.value("JWT_ISSUER"),
                audience: reader.value("JWT_AUDIENCE")))
        configuration.rulesRefresh = .milliseconds(Int((rulesRefresh * 1000).rounded()))
        return configuration
    }

    /// Reads the environment for a service's `main` — what every service reads, then what
    /// this one reads (`settings`) — or prints why it cannot start and exits with status 2
    /// (a configuration error is not worth a crash loop's stack trace).
    public static func forService<Settings>(
        _ name: String, defaultPort: Int, checksTokens: Bool = false,
        settings: (EnvironmentReader) throws -> Settings
    ) -> (Configuration, Settings) {
        do {
            let reader = EnvironmentReader()
            let configuration = try read(reader, defaultPort: defaultPort)
            // Tokens need the secret unless the identity provider's keys stand in for it;
            // a secret that is set must be valid either way.
            if checksTokens, configuration.jwksURL == nil || configuration.jwtSecret != nil {
                _ = try configuration.requireJWTSecret()
            }
            return (configuration, try settings(reader))
        } catch {
            FileHandle.standardError.write(Data("\(name): \(error)\n".utf8))
            exit(2)
        }
    }

    /// A pool on the primary (`DATABASE_URL`), `DATABASE_POOL_SIZE` connections unless
    /// told otherwise; with `DATABASE_REQUIRE_STANDBY`, its transactions return only once a
    /// standby holds their commits.
    public func primaryPool(size: Int? = nil, logger: Logger, statementTimeout: Duration? = .seconds(60)) -> PGPool {
        PGPool(
            url: databaseURL, size: size ?? databasePoolSize, logger: logger, statementTimeout: statementTimeout,
            standbyWait: databaseStandbyWait, slowThreshold: slowThreshold, isSampled: Traces.isSampled)
    }

    /// The broker endpoint from `AMQP_URL`.
    public func amqpEndpoint() throws(Invalid) -> AMQPEndpoint {
        guard let endpoint = AMQPEndpoint(url: amqpURL) else {
            throw Invalid(description:
                "AMQP_URL must look like amqp://user:pass@host:5672/vhost, or list a cluster's nodes so, separated by commas, with one vhost")
        }
        return endpoint
    }

    /// The token verifier of a service: HS256 with `JWT_SECRET`, the identity provider's
    /// JWKS, or both. The key set is loaded now when it can be; if the provider is down,
    /// the service starts anyway and loads it on the first token.
    public func tokenVerifier(logger: Logger) async throws -> TokenVerifier {
        var keySet: JWKSKeySet?
        if let jwksURL, let source = JWKSKeySet.Source(jwksURL) {
            let set = JWKSKeySet(source: source, logger: logger)
            await set.refresh()
            keySet = set
        }
        return try await TokenVerifier(secret: jwtSecret, keySet: keySet, policy: tokenPolicy)
    }

    /// The JWT secret, or the reason a token-checking service must refuse to start.
    public func requireJWTSecret() throws(Invalid) -> String {
        guard let jwtSecret, jwtSecret.utf8.count >= TokenMinter.minimumSecretBytes else {
            throw Invalid(description: "JWT_SECRET must be set to at least \(TokenMinter.minimumSecretBytes) bytes")
        }
        return jwtSecret
    }
}
