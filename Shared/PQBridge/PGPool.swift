import Logging
import Metrics
import NIOConcurrencyHelpers
import NIOPosix
import ServiceLifecycle
import Tracing

/// A fixed set of libpq connections, each used by one closure at a time on a thread of a
/// `NIOThreadPool` the pool owns, so blocking libpq calls never stall Swift's cooperative
/// pool or an event loop. Connections are opened lazily and reopened after a failure,
/// which is how the pool rides out a server restart.
///
/// Its timers run in `run()` (as a `Service`, or in a task of its own): a caller's wait for
/// a connection ends at `acquisitionTimeout` only while the pool runs, and idle connections
/// are checked only then. A pool that is not run (a command's, a benchmark's) waits as
/// long as it takes.
public final class PGPool: Sendable {
    private typealias State = PGPoolState<PGConnection, CheckedContinuation<PGConnection, any Error>>

    private let threads: NIOThreadPool
    /// Who has which connection, who waits: every decision is the state's (`PGPoolState`).
    private let state: NIOLockedValueBox<State>
    private let logger: Logger
    /// Waits for a connection (`syncline_db_pool_wait_seconds`), and connections in use
    /// out of the pool's size: what shows a pool too small for its load.
    private let waits: Timer
    /// The tracer bootstrapped before the pool was made; nil: tracing is off.
    private let tracer: (any Tracer)?
    /// Whether a holder's trace is sampled: only then are its waits and statements spans.
    private let isSampled: @Sendable (ServiceContext) -> Bool
    private let inUse: Gauge
    /// A connection waited for or a statement run (warnings), or a connection held (info:
    /// purges and big batches may), longer than this is logged: such waits stall every
    /// request behind them.
    public let slowThreshold: Duration
    /// Whether a failure to connect was logged and no connection has been made since: an
    /// outage is logged once, with libpq's reason, and its end once.
    private let outageLogged = NIOLockedValueBox(false)
    public let size: Int
    /// How long a caller waits for a free connection before `.timeout` (while the pool runs).
    public let acquisitionTimeout: Duration
    /// The deadline of the first wait after none, for the wait timer in `run()` (the state
    /// asks for the timer only when it is not running: at most one is ever pending).
    private let firstDeadlines: (stream: AsyncStream<ContinuousClock.Instant>, continuation: AsyncStream<ContinuousClock.Instant>.Continuation)
    /// How often, run as a `Service`, the pool checks connections idle that long.
    public let healthCheckInterval: Duration
    /// How long a committed transaction waits for a standby to confirm it before
    /// `transaction` throws `.unconfirmed` (nil: no wait, a commit is confirmed by itself).
    public let standbyWait: Duration?

    /// Called with each statement a connection of the pool is about to run, on the thread
    /// that runs it.
    public typealias Observer = @Sendable (PGQuery) -> Void

    /// - Parameters:
    ///   - statementTimeout: PostgreSQL's `statement_timeout` on every connection (nil: none).
    ///   - acquisitionTimeout: how long a caller may wait for a free connection.
    ///   - standbyWait: when set, every transaction's commit must be flushed by a standby
    ///     within it (`PGConnection.awaitStandby`), or `transaction` throws `.unconfirmed`.
    ///   - observer: shown every statement before it runs (nil: none).
    ///   - slowThreshold: what counts as slow for a wait, a statement or a hold.
    ///   - name: the `pool` label of its metrics (`primary`, `replica`).
    ///   - isSampled: whether a holder's trace is sampled, so that its statements are spans
    ///     (nil: asked of the tracer, which costs a `traceparent` made per checkout).
    public init(
        url: String, size: Int, logger: Logger,
        statementTimeout: Duration? = .seconds(60), acquisitionTimeout: Duration = .seconds(10),
        healthCheckInterval: Duration = .seconds(30), standbyWait: Duration? = nil, observer: Observer? = nil,
        slowThreshold: Duration = .seconds(1), name: String = "primary", isSampled: (@Sendable (ServiceContext) -> Bool)? = nil
    ) {
        self.slowThreshold = slowThreshold
        let tracer = InstrumentationSystem.tracer is NoOpTracer ? nil : InstrumentationSystem.tracer
        self.tracer = tracer
        self.isSampled = isSampled ?? { context in tracer.map { StatementTracing.isSampled(context, by: $0) } ?? false }
        waits = Timer(label: "syncline_db_pool_wait_seconds", dimensions: [("pool", name)], preferredDisplayUnit: .seconds)
        inUse = Gauge(label: "syncline_db_pool_in_use", dimensions: [("pool", name)])
        Gauge(label: "syncline_db_pool_size", dimensions: [("pool", name)]).record(size)
        inUse.record(0)
        let conninfo = url.contains("connect_timeout")
            ? url : url + (url.contains("?") ? "&" : "?") + "connect_timeout=5"
        self.size = size
        self.acquisitionTimeout = acquisitionTimeout
        self.healthCheckInterval = healthCheckInterval
        self.standbyWait = standbyWait
        self.firstDeadlines = AsyncStream.makeStream()
        self.threads = NIOThreadPool(numberOfThreads: size)
        self.threads.start()
        self.state = NIOLockedValueBox(State(
            connections: (0..<size).map { _ in PGConnection(conninfo: conninfo, statementTimeout: statementTimeout, observer: observer) },
            now: .now))
        self.logger = logger
    }

    /// Runs `body` with exclusive use of one connection, on a pool thread. Cancelling the
    /// calling task cancels the statement in flight (and fails the body's later ones); a
    /// transaction the body left open is rolled back before the connection is reused.
    public func withConnection<T: Sendable>(
        _ body: @escaping @Sendable (PGConnection) throws -> T
    ) async throws -> T {
        let (connection, id) = try await checkOut()
        let context = ServiceContext.current
        let sampled = tracer.flatMap { tracer in context.flatMap { isSampled($0) ? tracer : nil } }
        connection.hold(id, tracing: StatementTracing(tracer: sampled, context: context, logger: logger, slow: slowThreshold))
        let held = ContinuousClock.now
        defer {
            connection.release()
            checkIn(connection)
            let seconds = ContinuousClock.now - held
            if seconds > slowThreshold {
                logger.info("held a database connection", metadata: ["seconds": "\(seconds.seconds)"])
            }
        }
        let logger = self.logger
        let outageLogged = self.outageLogged
        return try await withTaskCancellationHandler {
            try await run(body, on: connection, logger: logger, outageLogged: outageLogged)
        } onCancel: {
            connection.cancel(holder: id)
        }
    }

    private func run<T: Sendable>(
        _ body: @escaping @Sendable (PGConnection) throws -> T, on connection: PGConnection,
        logger: Logger, outageLogged: NIOLockedValueBox<Bool>
    ) async throws -> T {
        try await threads.runIfActive {
            if !connection.isConnected {
                do {
                    try connection.connect()
                } catch {
                    if !outageLogged.withLockedValue({ logged in defer { logged = true }; return logged }) {
                        logger.warning("cannot connect to PostgreSQL", metadata: ["error": "\(error)"])
                    }
                    throw error
                }
                if outageLogged.withLockedValue({ logged in defer { logged = false }; return logged }) {
                    logger.info("connected to PostgreSQL again")
                } else {
                    logger.debug("connected to PostgreSQL")
                }
            }
            do {
                let value = try body(connection)
                connection.rollBack()
                return value
            } catch let error as PGError where error.code == .connection || error.isReadOnlyServer || error.code == .unconfirmed {
                // A server that turned read-only is a former primary after a failover: the
                // next connection (libpq's `target_session_attrs=read-write`) finds the new one.
                // So may one whose commits no standby confirms: it may be a former primary
                // not yet fenced.
                connection.close()
                throw error
            } catch {
                if connection.isConnected { connection.rollBack() } else { connection.close() }
                throw error
            }
        }
    }

    /// Runs `body` in a transaction on one connection; with a `standbyWait`, returns only
    /// once a standby holds its commit, and every commit it read, too.
    public func transaction<T: Sendable>(
        _ body: @escaping @Sendable (PGConnection) throws -> T
    ) async throws -> T {
        try await confirmed { connection in try connection.transaction(body) }
    }

    /// Runs `body` on one connection, each statement committing by itself; with a
    /// `standbyWait`, returns only once a standby holds what it wrote and every commit it
    /// read (what a caller acts on must not be lost with this server).
    public func confirmed<T: Sendable>(
        _ body: @escaping @Sendable (PGConnection) throws -> T
    ) async throws -> T {
        let standbyWait = self.standbyWait
        return try await withConnection { connection in
            let value = try body(connection)
            if let standbyWait { try connection.awaitStandby(within: standbyWait) }
            return value
        }
    }

    /// Whether PostgreSQL answers on a connection of the pool now (readiness checks).
    public func ping() async -> Bool {
        (try? await execute("SELECT 1")) != nil
    }

    /// Runs one statement (typed parameters, binary results).
    @discardableResult
    public func execute(_ query: PGQuery) async throws -> PGRows {
        try await withConnection { try $0.execute(query) }
    }

    /// A free connection, and the id of this checkout. Waits at most `acquisitionTimeout`
    /// (then `.timeout`); a cancelled caller stops waiting (`.cancelled`).
    private func checkOut() async throws -> (PGConnection, UInt64) {
        let id: UInt64
        switch state.withLockedValue({ $0.checkOut() }) {
        case .closed: throw PGError(code: .closed, message: "pool closed")
        case .connection(let connection, let checkout, let idle):
            inUse.record(size - idle)
            return (connection, checkout)
        case .wait(let checkout): id = checkout
        }
        let waitStarted = ContinuousClock.now
        // In the caller's trace, the wait is a span of its own: time no statement accounts for.
        let span = tracer.flatMap { tracer in
            ServiceContext.current.flatMap { isSampled($0) ? tracer.startSpan("wait for a database connection", context: $0, ofKind: .internal) : nil }
        }
        defer {
            span?.end()
            let waited = ContinuousClock.now - waitStarted
            waits.recordNanoseconds(Int64(waited.components.seconds) * 1_000_000_000 + Int64(waited.components.attoseconds / 1_000_000_000))
            if waited > slowThreshold {
                logger.warning("waited for a database connection", metadata: ["seconds": "\(waited.seconds)"])
            }
        }
        // A cancel that lands after the wait ended leaves its mark: cleared here.
        defer { state.withLockedValue { $0.ended(id) } }
        let connection = try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<PGConnection, any Error>) in
                let deadline = ContinuousClock.now + acquisitionTimeout
                switch state.withLockedValue({ $0.wait(id, continuation, until: deadline) }) {
                case .connection(let connection): continuation.resume(returning: connection)
                case .closed: continuation.resume(throwing: PGError(code: .closed, message: "pool closed"))
                case .cancelled: continuation.resume(throwing: PGError(code: .cancelled, message: "cancelled while waiting for a connection"))
                case .waits(startTimer: true): firstDeadlines.continuation.yield(deadline)
                case .waits(startTimer: false): break
                }
            }
        } onCancel: {
            state.withLockedValue { $0.cancel(id) }?
                .resume(throwing: PGError(code: .cancelled, message: "cancelled while waiting for a connection"))
        }
        return (connection, id)
    }

    /// The wait timer: from each first deadline on, ends each wait that reaches its deadline
    /// with `.timeout`, sleeping until the earliest, until nobody waits; then waits for the
    /// next first deadline. Ends when the task running it is cancelled.
    private func endWaits() async {
        for await first in firstDeadlines.stream {
            await endWaits(from: first)
        }
    }

    private func endWaits(from first: ContinuousClock.Instant) async {
        var next: ContinuousClock.Instant? = first
        while let deadline = next {
            do { try await Task.sleep(until: deadline, clock: .continuous) } catch { return }
            let (expired, following) = state.withLockedValue { $0.expire(now: .now) }
            for waiter in expired {
                waiter.resume(throwing: PGError(code: .timeout, message: "none came free within \(acquisitionTimeout)"))
            }
            next = following
        }
    }

    private func checkIn(_ connection: PGConnection) {
        switch state.withLockedValue({ $0.checkIn(connection, now: .now) }) {
        case .close: connection.close()
        case .handTo(let waiter): waiter.resume(returning: connection)
        case .idle(let idle): inUse.record(size - idle)
        }
    }

    /// Closes every connection and stops the threads; waiting callers get `.closed`.
    public func shutdown() async {
        firstDeadlines.continuation.finish()
        let (waiters, idle) = state.withLockedValue { $0.close() }
        waiters.forEach { $0.resume(throwing: PGError(code: .closed, message: "pool closed")) }
        idle.forEach { $0.close() }
        try? await threads.shutdownGracefully()
    }
}

/// As a `Service`: ends waits at their deadlines and checks idle connections until the
/// group shuts down gracefully (or the task running it is cancelled), then closes the pool
/// (list it before the services that use it: a group stops them first).
extension PGPool: Service {
    public func run() async throws {
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await self.endWaits() }
                group.addTask {
                    while !Task.isCancelled {
                        do { try await Task.sleep(for: self.healthCheckInterval) } catch { return }
                        await self.checkIdleConnections()
                    }
                }
            }
        }
        await shutdown()
    }

    /// Each connection idle for a whole interval answers `SELECT 1` or is closed, so that a
    /// server restart or a connection dropped by the network is found here, not by a
    /// request. A connection is taken only while idle: callers never wait for a check.
    func checkIdleConnections() async {
        // A connection checked in this round came back after this: not taken again.
        let idleSince = ContinuousClock.now - healthCheckInterval
        for _ in 0..<size {
            guard let connection = state.withLockedValue({ $0.takeIdle(since: idleSince) }) else { return }
            _ = try? await threads.runIfActive {
                guard connection.isConnected else { return }
                do {
                    try connection.execute("SELECT 1")
                } catch {
                    connection.close()
                }
            }
            checkIn(connection)
        }
    }
}

extension Duration {
    /// In seconds, to the millisecond (for logs).
    var seconds: String {
        let (whole, attoseconds) = components
        return "\(((Double(whole) + Double(attoseconds) / 1e18) * 1000).rounded() / 1000)"
    }
}
