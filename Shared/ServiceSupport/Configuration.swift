import AMQPBridge
import Auth
import Foundation
import Logging
import SyncModels

/// Everything a service reads from its environment (SPEC §8), built in one place with
/// documented defaults that suit local development. Secrets are never logged.
public struct Configuration: Sendable {
    public var databaseURL: String
    public var amqpURL: String
    public var jwtSecret: String?
    public var port: Int
    /// Intake transactions a gateway runs at once, each committing the pushes that
    /// waited for it.
    public var intakeConcurrency: Int
    /// Job messages a worker holds unacknowledged.
    public var workerPrefetch: Int
    /// Transactions a worker runs at once, each applying one batch of jobs.
    public var workerConcurrency: Int
    /// The most jobs one transaction applies.
    public var workerBatchJobs: Int
    /// The most ops one transaction applies (a job with more goes alone).
    public var workerBatchOps: Int
    public var maxAttempts: Int
    public var retryDelays: [Double]
    public var maxClockSkew: Double
    public var tombstoneRetention: Double
    public var jobRetention: Double
    public var deadLetterRetention: Double
    /// Devices revoked, or not seen pushing, for this long are deleted by purge.
    public var deviceRetention: Double
    public var allowPrivateWebhooks: Bool
    public var logLevel: Logger.Level
    public var databasePoolSize: Int
    /// How long a committed job may stay unpublished before the relay publishes it.
    public var relayAfter: Double
    /// How often a stream without news gets a heartbeat.
    public var streamHeartbeat: Double
    /// The identity provider's key set (`JWT_JWKS_URL`) and what its tokens must say.
    public var jwksURL: String?
    public var tokenPolicy: TokenPolicy
    /// Origins whose browsers may call the API (`*` for any); empty: no CORS headers.
    public var corsAllowedOrigins: [String]
    public var pushRateLimit: RateLimit
    public var streamRateLimit: RateLimit
    public var publicRateLimit: RateLimit
    /// Publish and fork ops, per user: each costs a token, so guessing public ids through
    /// pushes is no faster than through public reads.
    public var publicIDRateLimit: RateLimit
    /// The most streams one user may hold open on one fanout replica.
    public var streamsPerUser: Int
    /// How long a public id stays held by a record without data (never written, or deleted).
    public var publicIDReservation: Double
    /// A connection that sends nothing for this long (mid-headers, mid-body, or idle
    /// between requests) is closed.
    public var httpIdleTimeout: Double
    /// How long `DELETE /v1/me` erases inside the request before it answers 202.
    public var accountDeletionInline: Double

    public struct Invalid: Error, CustomStringConvertible {
        public let description: String
        public init(description: String) { self.description = description }
    }

    public static func fromEnvironment(
        _ environment: [String: String] = ProcessInfo.processInfo.environment, defaultPort: Int = 8080
    ) throws(Invalid) -> Configuration {
        func value(_ name: String) -> String? {
            environment[name].flatMap { $0.isEmpty ? nil : $0 }
        }
        func int(_ name: String, _ fallback: Int) throws(Invalid) -> Int {
            guard let text = value(name) else { return fallback }
            guard let number = Int(text), number > 0 else { throw Invalid(description: "\(name) must be a positive integer") }
            return number
        }
        func duration(_ name: String, _ fallback: String) throws(Invalid) -> Double {
            guard let seconds = Durations.parse(value(name) ?? fallback) else {
                throw Invalid(description: "\(name) must be a duration such as 500ms, 5s, 2m, 1h or 30d")
            }
            return seconds
        }
        let delays = (value("RETRY_DELAYS") ?? "1s,5s,25s,2m").split(separator: ",").map { Durations.parse(String($0)) }
        guard !delays.isEmpty, delays.allSatisfy({ ($0 ?? 0) >= 0.001 }) else {
            throw Invalid(description: "RETRY_DELAYS must be a comma-separated list of durations of at least 1ms")
        }
        func rate(_ name: String, _ fallback: String) throws(Invalid) -> RateLimit {
            guard let limit = RateLimit(value(name) ?? fallback) else {
                throw Invalid(description: "\(name) must look like 20/s,burst=40 (or 600/m; off disables it)")
            }
            return limit
        }
        if let url = value("JWT_JWKS_URL"), JWKSKeySet.Source(url) == nil {
            throw Invalid(description: "JWT_JWKS_URL must be an https URL, an http URL on a loopback address, or a file path")
        }
        let origins = (value("CORS_ALLOWED_ORIGINS") ?? "").split(separator: ",")
            .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        let levelText = value("LOG_LEVEL") ?? "info"
        guard let level = Logger.Level(rawValue: levelText.lowercased()) else {
            throw Invalid(description: "LOG_LEVEL must be one of trace, debug, info, notice, warning, error, critical")
        }
        return Configuration(
            databaseURL: value("DATABASE_URL") ?? "postgresql://syncline:syncline@127.0.0.1:5432/syncline",
            amqpURL: value("AMQP_URL") ?? "amqp://guest:guest@127.0.0.1:5672/%2f",
            jwtSecret: value("JWT_SECRET"),
            port: try int("PORT", defaultPort),
            intakeConcurrency: try int("INTAKE_CONCURRENCY", 2),
            workerPrefetch: min(try int("WORKER_PREFETCH", 128), Int(UInt16.max)),
            workerConcurrency: try int("WORKER_CONCURRENCY", 4),
            workerBatchJobs: try int("WORKER_BATCH_JOBS", 32),
            workerBatchOps: try int("WORKER_BATCH_OPS", 2_000),
            maxAttempts: try int("MAX_ATTEMPTS", 5),
            retryDelays: delays.compactMap { $0 },
            maxClockSkew: try duration("MAX_CLOCK_SKEW", "5m"),
            tombstoneRetention: try duration("TOMBSTONE_RETENTION", "30d"),
            jobRetention: try duration("JOB_RETENTION", "7d"),
            deadLetterRetention: try duration("DEAD_LETTER_RETENTION", "30d"),
            deviceRetention: try duration("DEVICE_RETENTION", "90d"),
            allowPrivateWebhooks: value("ALLOW_PRIVATE_WEBHOOKS") == "true",
            logLevel: level,
            databasePoolSize: try int("DATABASE_POOL_SIZE", 8),
            relayAfter: try duration("RELAY_AFTER", "2s"),
            streamHeartbeat: try duration("STREAM_HEARTBEAT", "30s"),
            jwksURL: value("JWT_JWKS_URL"),
            tokenPolicy: TokenPolicy(
                userClaim: value("JWT_USER_CLAIM") ?? "sub", adminClaim: value("JWT_ADMIN_CLAIM") ?? "role",
                adminValue: value("JWT_ADMIN_VALUE") ?? "admin", issuer: value("JWT_ISSUER"), audience: value("JWT_AUDIENCE")),
            corsAllowedOrigins: origins,
            pushRateLimit: try rate("RATE_LIMIT_PUSH", "20/s,burst=40"),
            streamRateLimit: try rate("RATE_LIMIT_STREAMS", "1/s,burst=10"),
            publicRateLimit: try rate("RATE_LIMIT_PUBLIC", "50/s,burst=100"),
            publicIDRateLimit: try rate("RATE_LIMIT_PUBLIC_IDS", "10/s,burst=500"),
            streamsPerUser: try int("STREAMS_PER_USER", 20),
            publicIDReservation: try duration("PUBLIC_ID_RESERVATION", "1d"),
            httpIdleTimeout: try duration("HTTP_IDLE_TIMEOUT", "30s"),
            accountDeletionInline: try duration("ACCOUNT_DELETION_INLINE", "2s"))
    }

    /// Reads the environment for a service's `main`, or prints why it cannot start and
    /// exits with status 2 (a configuration error is not worth a crash loop's stack trace).
    public static func forService(_ name: String, defaultPort: Int, checksTokens: Bool = false) -> Configuration {
        do {
            let configuration = try fromEnvironment(defaultPort: defaultPort)
            // Tokens need the secret unless the identity provider's keys stand in for it;
            // a secret that is set must be valid either way.
            if checksTokens, configuration.jwksURL == nil || configuration.jwtSecret != nil {
                _ = try configuration.requireJWTSecret()
            }
            return configuration
        } catch {
            FileHandle.standardError.write(Data("\(name): \(error)\n".utf8))
            exit(2)
        }
    }

    /// The broker endpoint from `AMQP_URL`.
    public func amqpEndpoint() throws(Invalid) -> AMQPEndpoint {
        guard let endpoint = AMQPEndpoint(url: amqpURL) else {
            throw Invalid(description: "AMQP_URL must look like amqp://user:pass@host:5672/vhost")
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
