import Foundation
import Logging
import NIOConcurrencyHelpers
import SyncModels
import NIOPosix

/// Publishes with publisher confirms over one connection owned by one dedicated thread.
/// Concurrent publishes are batched: while one batch waits for its confirms (a quorum
/// queue confirms after its log is synced), the next callers' messages gather and go out
/// together, so throughput does not stop at one fsync per message.
/// Opens (and declares the topology) lazily; after a failure it waits out a growing
/// backoff before trying the broker again, failing fast meanwhile so callers such as the
/// push handler never stall on a dead broker.
public final class AMQPPublisher: Sendable {
    /// Touched only on `thread`.
    private final class Owned: @unchecked Sendable {
        var connection: AMQPConnection?
        var retryAfter = Date.distantPast
        var backoff = Backoff(base: 0.25, cap: 5, jitter: false)
        /// A failure to connect was logged and no connection has been made since.
        var outageLogged = false
        var nodes: BrokerNodes

        init(nodes: BrokerNodes) { self.nodes = nodes }
    }

    /// A caller's messages waiting for a run, and how it is answered: published, or
    /// handed the lead of the next run.
    private typealias Waiter = (messages: [OutgoingMessage], continuation: CheckedContinuation<Turn, any Error>)
    private enum Turn: Sendable { case published, lead }

    private let turns = NIOLockedValueBox(TakingTurns<Waiter>())
    private let thread = NIOThreadPool(numberOfThreads: 1)
    private let owned: Owned
    private let topology: AMQPTopology
    private let confirmTimeout: TimeInterval
    /// A batch the broker takes longer to confirm logs a warning.
    private let slowThreshold: Duration
    private let logger: Logger

    public init(
        endpoint: AMQPEndpoint, topology: AMQPTopology, confirmTimeout: TimeInterval = 5, slowThreshold: Duration = .seconds(1),
        logger: Logger
    ) {
        owned = Owned(nodes: BrokerNodes(endpoint, role: "publisher"))
        self.topology = topology
        self.confirmTimeout = confirmTimeout
        self.slowThreshold = slowThreshold
        self.logger = logger
        thread.start()
    }

    /// Publishes the messages and returns once the broker confirmed every one. Callers take
    /// turns: while one batch waits for its confirms, the next callers' messages gather,
    /// and the first of them publishes them all together once it ends.
    public func publish(_ messages: [OutgoingMessage]) async throws {
        guard !messages.isEmpty else { return }
        let turn = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Turn, any Error>) in
            if turns.withLockedValue({ $0.arrive((messages, continuation)) }) { continuation.resume(returning: .lead) }
        }
        if turn == .lead { try await lead(messages) }
    }

    /// Publishes the leader's messages and every batch waiting as one confirmed batch,
    /// answers those batches' callers, and hands the lead to the first that arrived since.
    private func lead(_ own: [OutgoingMessage]) async throws {
        let served = turns.withLockedValue { $0.takeWaiting() }
        let outcome: Result<Void, any Error>
        do {
            try await publishConfirmed(own + served.flatMap(\.messages))
            outcome = .success(())
        } catch {
            outcome = .failure(error)
        }
        // The next leader first, so its batch starts before the callers just served run on.
        turns.withLockedValue { $0.finish() }?.continuation.resume(returning: .lead)
        for waiter in served { waiter.continuation.resume(with: outcome.map { .published }) }
        try outcome.get()
    }

    /// One batch, published with confirms on the publisher's thread; a slow confirm is logged.
    private func publishConfirmed(_ messages: [OutgoingMessage]) async throws {
        let timeout = confirmTimeout
        let started = ContinuousClock.now
        try await onThread(shared: true) { connection in try connection.publishConfirmed(messages, timeout: timeout) }
        let took = ContinuousClock.now - started
        guard took > slowThreshold else { return }
        // The batch serves many callers: their traces are named by the messages.
        let traces = messages.compactMap { $0.headers["traceparent"].flatMap { if case .string(let t) = $0 { t } else { nil } } }
        logger.warning("slow publisher confirm", metadata: [
            "messages.count": "\(messages.count)",
            "seconds": "\(Double(took.components.seconds) + Double(took.components.attoseconds) / 1e18)",
            "trace.ids": .array(traces.prefix(10).map { .string(String($0.split(separator: "-").dropFirst().first ?? "")) }),
        ])
    }

    public func queueStats(_ names: [String]) async throws -> [QueueStats] {
        try await onThread { connection in try names.map { try connection.queueStats($0) } }
    }

    /// Takes the messages `remove` picks out of `queue` and leaves the others in place
    /// (see `AMQPConnection.sweep`). Publishing waits while a sweep runs.
    public func sweep(
        queue: String, limit: Int = 1_000_000, remove: @escaping @Sendable (AMQPDelivery) -> Bool
    ) async throws -> SweepResult {
        try await onThread { connection in try connection.sweep(queue: queue, limit: limit, remove: remove) }
    }

    /// A queue's depth and consumers, or nil when the broker has no queue of that name.
    public func queueStatsIfPresent(_ name: String) async throws -> QueueStats? {
        try await onThread { connection in try connection.queueStatsIfPresent(name) }
    }

    /// Moves every ready message of one queue into another, each confirmed there before it
    /// leaves (see `AMQPConnection.moveMessages`). Publishing waits meanwhile.
    public func moveMessages(from source: String, to destination: String) async throws -> Int {
        let timeout = confirmTimeout
        return try await onThread { connection in try connection.moveMessages(from: source, to: destination, timeout: timeout) }
    }

    /// Adds (or, with `bound: false`, removes) bindings, in order, over this connection.
    public func setBindings(_ bindings: [AMQPTopology.Binding], bound: Bool) async throws {
        guard !bindings.isEmpty else { return }
        try await onThread { connection in
            for binding in bindings {
                if bound {
                    try connection.bind(queue: binding.queue, exchange: binding.exchange, routingKey: binding.routingKey)
                } else {
                    try connection.unbind(queue: binding.queue, exchange: binding.exchange, routingKey: binding.routingKey)
                }
            }
        }
    }

    public func deleteQueue(_ name: String) async throws {
        try await onThread { try $0.deleteQueue(name) }
    }

    /// Whether the broker can be reached now (for `/readyz`).
    public func ping() async -> Bool {
        (try? await onThread { _ in () }) != nil
    }

    public func shutdown() async {
        let owned = self.owned
        _ = try? await thread.runIfActive { owned.connection?.close(); owned.connection = nil }
        try? await thread.shutdownGracefully()
    }

    /// Runs `body` with the connection on the publisher's thread. Work for one caller ends
    /// when its task is cancelled; work shared by several (a batch of publishes) is
    /// `shared`, and runs to its end whoever leads it.
    private func onThread<T: Sendable>(
        shared: Bool = false, _ body: @escaping @Sendable (AMQPConnection) throws -> T
    ) async throws -> T {
        let owned = self.owned, topology = self.topology, logger = self.logger
        let work: @Sendable () throws -> T = {
            for attempt in 0..<2 {
                let reused = owned.connection != nil
                let connection = try Self.connection(owned, topology, logger)
                do {
                    return try body(connection)
                } catch let error as AMQPError {
                    // Any failure may have left the channel unusable: start afresh. A reused
                    // connection may simply have gone stale, so try once more on a new one.
                    connection.abandon()
                    owned.connection = nil
                    if error.code == .connection { owned.nodes.lost() }
                    logger.warning("AMQP publish failed", metadata: ["error": "\(error)"])
                    if !reused || attempt == 1 || error.code == .notConfirmed { throw error }
                }
            }
            throw AMQPError(.connection, "unreachable")
        }
        guard shared else { return try await thread.runIfActive(work) }
        return try await withCheckedThrowingContinuation { continuation in
            thread.submit { state in
                guard case .active = state else { return continuation.resume(throwing: AMQPError(.connection, "publisher shut down")) }
                continuation.resume(with: Result(catching: work))
            }
        }
    }

    private static func connection(
        _ owned: Owned, _ topology: AMQPTopology, _ logger: Logger
    ) throws -> AMQPConnection {
        if let connection = owned.connection { return connection }
        guard Date() >= owned.retryAfter else {
            throw AMQPError(.connection, "broker unavailable; next attempt in \(Int(owned.retryAfter.timeIntervalSinceNow * 1000)) ms")
        }
        do {
            let connection = try owned.nodes.connect(heartbeatSeconds: 0, logger: logger) { connection throws(AMQPError) in
                try connection.declare(topology)
                try connection.enableConfirms()
            }
            owned.connection = connection
            owned.backoff.reset()
            owned.outageLogged = false
            return connection
        } catch {
            owned.retryAfter = Date().addingTimeInterval(owned.backoff.next())
            if !owned.outageLogged {
                owned.outageLogged = true
                logger.warning("AMQP publisher cannot connect; retrying", metadata: ["error": "\(error)"])
            }
            throw error
        }
    }
}
