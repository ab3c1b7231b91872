import Logging
import Metrics
import NIOConcurrencyHelpers
import ServiceLifecycle
import SyncModels

/// The rules a process judges by: loaded at start, then the current version looked up
/// every `interval` (one indexed read) and the new document loaded and compiled when it
/// changed, so every gateway follows an applied document within seconds, without a
/// restart (a worker's apply also reads the version under its locks and hands a newer one
/// to `adopt`). A failed look keeps the rules it has.
public final class RulesCache: Service, Sendable {
    public typealias Load = @Sendable () async throws -> Rules
    public typealias Version = @Sendable () async throws -> Int64

    /// Nil until the first load: nothing is judged by rules not yet read.
    private let box = NIOLockedValueBox<Rules?>(nil)
    private let interval: Duration
    private let load: Load
    private let version: Version
    private let logger: Logger
    private let gauge = Gauge(label: "syncline_rules_version")

    public init(interval: Duration, logger: Logger, version: @escaping Version, load: @escaping Load) {
        self.interval = interval
        self.logger = logger
        self.version = version
        self.load = load
    }

    /// The rules as last loaded; loaded now when they never were (a request that comes
    /// before the first look waits for it, and fails with it).
    public func rules() async throws -> Rules {
        if let held = box.withLockedValue({ $0 }) { return held }
        try await refresh()
        return box.withLockedValue { $0 } ?? .none
    }

    /// Takes rules loaded elsewhere (a worker's apply reads the version under its locks)
    /// when they are newer than the ones held.
    public func adopt(_ rules: Rules) {
        let replaced = box.withLockedValue { held -> Bool in
            if let held, held.version >= rules.version { return false }
            held = rules
            return true
        }
        if replaced { loaded(rules) }
    }

    private func loaded(_ rules: Rules) {
        gauge.record(rules.version)
        logger.info("rules loaded", metadata: ["rules.version": "\(rules.version)"])
    }

    /// Loads the current version when it differs from the one held (and at once after
    /// this process applied a document itself).
    public func refresh() async throws {
        if let known = box.withLockedValue({ $0?.version }), try await version() == known { return }
        adopt(try await load())
    }

    public func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            do {
                try await refresh()
            } catch {
                logger.warning("could not look up the rules; judging by the version held", metadata: [
                    "rules.version": "\(box.withLockedValue { $0?.version ?? 0 })", "error": "\(error)",
                ])
            }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: self.interval) }
        }
        try? await gracefulShutdown()
    }
}
