import AsyncHTTPClient
import Foundation
import JWTKit
import Logging
import NIOCore
import SyncModels

/// The identity provider's public keys (`JWT_JWKS_URL`: https, http on loopback, or a
/// file), cached. A `kid` not in the set refreshes it at most once per 30 s, the set is
/// refreshed hourly, and while the endpoint is down the cached keys keep working. Only a
/// token whose `kid` the set lacks waits for a fetch: the hourly refresh runs behind the
/// cached keys, so a slow identity provider never holds up requests it need not answer.
public actor JWKSKeySet {
    public enum Source: Sendable, Equatable {
        case url(URL)
        case file(String)

        /// `https://…`, `http://` on a loopback host, `file:///…` or an absolute path.
        public init?(_ text: String) {
            if text.hasPrefix("/") {
                self = .file(text)
                return
            }
            guard let url = URL(string: text), let scheme = url.scheme?.lowercased() else { return nil }
            switch scheme {
            case "file": self = .file(url.path)
            case "https" where url.host != nil: self = .url(url)
            case "http" where ["127.0.0.1", "::1", "[::1]", "localhost"].contains(url.host?.lowercased() ?? ""):
                self = .url(url)
            default: return nil
            }
        }
    }

    /// One key of the set and the algorithm its type allows.
    public struct Key: Sendable {
        let algorithm: String
        let keys: JWTKeyCollection

        func accepts(alg: String) -> Bool { alg == algorithm }
    }

    private let source: Source
    private let logger: Logger
    private var keys: [String: Key] = [:]
    private var schedule = JWKSRefreshSchedule()
    private var refreshing: Task<Void, Never>?
    private let now: @Sendable () -> Date
    /// The seconds a fetch of the key set may take, its body included.
    private let fetchDeadline: Double

    public init(
        source: Source, logger: Logger, now: @escaping @Sendable () -> Date = { Date() }, fetchDeadline: Double = 10
    ) {
        self.source = source
        self.logger = logger
        self.now = now
        self.fetchDeadline = fetchDeadline
    }

    /// Whether the set holds a key named `kid`.
    public func holds(kid: String) -> Bool { keys[kid] != nil }

    /// The key `kid` names, refreshing the set first when the schedule says so.
    func key(kid: String) async -> Key? {
        let known = keys[kid] != nil
        if schedule.shouldRefresh(now: now(), kidKnown: known) {
            let fetching = startRefresh()
            if !known { await fetching.value }
        }
        return keys[kid]
    }

    /// Fetches the set now (concurrent callers share one fetch); on failure the cached
    /// keys stay.
    public func refresh() async {
        await startRefresh().value
    }

    /// The fetch under way, or a new one.
    private func startRefresh() -> Task<Void, Never> {
        if let refreshing { return refreshing }
        let task = Task {
            await self.fetch()
            self.refreshing = nil
        }
        refreshing = task
        return task
    }

    private func fetch() async {
        schedule.attempted(at: now())
        do {
            let data: Data
            switch source {
            case .file(let path):
                data = try Data(contentsOf: URL(fileURLWithPath: path))
            case .url(let url):
                // The whole answer within the deadline: a body sent slowly must not hold the refresh.
                data = try await withDeadline(seconds: fetchDeadline) {
                    let response = try await Self.client.execute(HTTPClientRequest(url: url.absoluteString), timeout: .seconds(5))
                    guard response.status == .ok else { throw JWKSError(description: "the JWKS endpoint answered \(response.status.code)") }
                    return Data(try await response.body.collect(upTo: Self.maxDocumentBytes).readableBytesView)
                }
            }
            let parsed = try await Self.parse(data, logger: logger)
            keys = parsed
            schedule.succeeded(at: now())
            logger.info("identity provider keys loaded", metadata: ["jwks.kids": "\(parsed.keys.sorted())"])
        } catch {
            logger.warning("cannot load the identity provider's keys; cached keys stay in use", metadata: [
                "error": "\(error)", "jwks.cached": "\(keys.count)",
            ])
        }
    }

    struct JWKSError: Error, CustomStringConvertible { let description: String }

    /// The client key sets are fetched with, for the process's life. It follows no
    /// redirect: a 3xx is a failed fetch, so the keys never come from another address than
    /// the one configured (nor over plain http from an https URL).
    static let client = HTTPClient(
        eventLoopGroup: HTTPClient.defaultEventLoopGroup,
        configuration: HTTPClient.Configuration(
            redirectConfiguration: .disallow, timeout: .init(connect: .seconds(5), read: .seconds(5))))

    /// The largest key set read: an identity provider's holds a handful of keys.
    static let maxDocumentBytes = 1 << 20

    /// The signing keys of a JWKS document by `kid`. Keys without a `kid`, encryption
    /// keys, symmetric (`oct`) keys and key types Syncline does not accept are left out.
    static func parse(_ data: Data, logger: Logger) async throws -> [String: Key] {
        guard let root = (try? JSONParser.parse(data))?.objectValue, case .array(let entries)? = root["keys"] else {
            throw JWKSError(description: "not a JWKS document (no keys array)")
        }
        var keys: [String: Key] = [:]
        for entry in entries {
            guard let fields = entry.objectValue, let kid = fields["kid"]?.stringValue,
                  fields["use"]?.stringValue ?? "sig" == "sig"
            else { continue }
            let algorithm: String
            switch (fields["kty"]?.stringValue, fields["crv"]?.stringValue) {
            case ("RSA", _): algorithm = "RS256"
            case ("EC", "P-256"): algorithm = "ES256"
            case ("OKP", "Ed25519"): algorithm = "EdDSA"
            default: continue
            }
            if let declared = fields["alg"]?.stringValue, declared != algorithm { continue }
            do {
                var withAlgorithm = fields
                withAlgorithm["alg"] = .string(algorithm)
                let jwk = try JSONDecoder().decode(JWK.self, from: Data(JSONWriter.bytes(.object(withAlgorithm))))
                keys[kid] = Key(algorithm: algorithm, keys: try await JWTKeyCollection().add(jwk: jwk))
            } catch {
                logger.warning("skipping an unreadable key of the JWKS", metadata: ["jwks.kid": "\(kid)", "error": "\(error)"])
            }
        }
        return keys
    }
}
