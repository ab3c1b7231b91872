import Logging
import NIOConcurrencyHelpers
import NIOPosix

/// A fixed set of libpq connections, each used by one closure at a time on a thread of a
/// `NIOThreadPool` the pool owns, so blocking libpq calls never stall Swift's cooperative
/// pool or an event loop. Connections are opened lazily and reopened after a failure,
/// which is how the pool rides out a server restart.
public final class PGPool: Sendable {
    private struct State {
        var idle: [PGConnection]
        var waiters: [CheckedContinuation<PGConnection?, Never>] = []
        var closed = false
    }

    private let threads: NIOThreadPool
    private let state: NIOLockedValueBox<State>
    private let logger: Logger
    /// A connection waited for (a warning), or held (info: purges and big batches may), longer
    /// than this is logged: such waits stall every request behind them.
    static let slow = Duration.seconds(1)
    /// Whether a failure to connect was logged and no connection has been made since: an
    /// outage is logged once, with libpq's reason, and its end once.
    private let outageLogged = NIOLockedValueBox(false)
    public let size: Int

    public init(url: String, size: Int, logger: Logger) {
        let conninfo = url.contains("connect_timeout")
            ? url : url + (url.contains("?") ? "&" : "?") + "connect_timeout=5"
        self.size = size
        self.threads = NIOThreadPool(numberOfThreads: size)
        self.threads.start()
        self.state = NIOLockedValueBox(
            State(idle: (0..<size).map { _ in PGConnection(conninfo: conninfo) }))
        self.logger = logger
    }

    /// Runs `body` with exclusive use of one connection, on a pool thread.
    public func withConnection<T: Sendable>(
        _ body: @escaping @Sendable (PGConnection) throws -> T
    ) async throws -> T {
        let connection = try await checkOut()
        let held = ContinuousClock.now
        defer {
            checkIn(connection)
            let seconds = ContinuousClock.now - held
            if seconds > Self.slow {
                logger.info("held a database connection", metadata: ["seconds": "\(seconds.seconds)"])
            }
        }
        let logger = self.logger
        let outageLogged = self.outageLogged
        return try await threads.runIfActive {
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
                return try body(connection)
            } catch let error as PGError where error.code == .connection {
                connection.close()
                throw error
            } catch {
                if !connection.isConnected { connection.close() }
                throw error
            }
        }
    }

    /// Runs `body` in a transaction on one connection.
    public func transaction<T: Sendable>(
        _ body: @escaping @Sendable (PGConnection) throws -> T
    ) async throws -> T {
        try await withConnection { connection in try connection.transaction(body) }
    }

    /// Runs one statement.
    @discardableResult
    public func query(_ sql: String, _ parameters: [(any PGBindable)?] = []) async throws -> PGResult {
        try await withConnection { try $0.query(sql, parameters) }
    }

    private func checkOut() async throws(PGError) -> PGConnection {
        let immediate: PGConnection?? = state.withLockedValue { state in
            if state.closed { return .some(nil) }
            return state.idle.popLast().map { .some($0) } ?? nil
        }
        switch immediate {
        case .some(.some(let connection)): return connection
        case .some(.none): throw PGError(code: .closed, message: "pool closed")
        case .none: break
        }
        let waitStarted = ContinuousClock.now
        defer {
            let waited = ContinuousClock.now - waitStarted
            if waited > Self.slow {
                logger.warning("waited for a database connection", metadata: ["seconds": "\(waited.seconds)"])
            }
        }
        let connection = await withCheckedContinuation { (continuation: CheckedContinuation<PGConnection?, Never>) in
            let ready: PGConnection?? = state.withLockedValue { state in
                if state.closed { return .some(nil) }
                if let connection = state.idle.popLast() { return .some(connection) }
                state.waiters.append(continuation)
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
        guard let connection else { throw PGError(code: .closed, message: "pool closed") }
        return connection
    }

    private func checkIn(_ connection: PGConnection) {
        let (waiter, closed): (CheckedContinuation<PGConnection?, Never>?, Bool) = state.withLockedValue { state in
            if state.closed { return (nil, true) }
            if !state.waiters.isEmpty { return (state.waiters.removeFirst(), false) }
            state.idle.append(connection)
            return (nil, false)
        }
        if closed { connection.close() }
        waiter?.resume(returning: connection)
    }

    /// Closes every connection and stops the threads; waiting callers get `.closed`.
    public func shutdown() async {
        let (waiters, idle) = state.withLockedValue { state in
            state.closed = true
            defer { state.waiters = []; state.idle = [] }
            return (state.waiters, state.idle)
        }
        waiters.forEach { $0.resume(returning: nil) }
        idle.forEach { $0.close() }
        try? await threads.shutdownGracefully()
    }
}

extension Duration {
    /// In seconds, to the millisecond (for logs).
    fileprivate var seconds: String {
        let (whole, attoseconds) = components
        return "\(((Double(whole) + Double(attoseconds) / 1e18) * 1000).rounded() / 1000)"
    }
}
