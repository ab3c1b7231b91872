internal import CLibPQ
import Foundation

/// One libpq connection. Not thread-safe: the pool hands it to one closure at a time,
/// which runs on one of the pool's own threads, never on the cooperative pool.
public final class PGConnection: @unchecked Sendable {
    // @unchecked: `handle` is touched only by the closure holding this connection's
    // pool slot, so never by two threads at once.
    private var handle: OpaquePointer?
    private let conninfo: String
    /// Statements prepared on this connection, by SQL text: the server parses and plans
    /// each once instead of on every call.
    private var prepared: [String: String] = [:]
    static let maxPrepared = 256
    /// Set on every new connection (nil: the server's default, no limit).
    private let statementTimeout: Duration?
    /// Cancelling from another thread: libpq's PGcancel for this connection (taken when it
    /// opens, freed when it closes), which checkout holds the connection, and whether that
    /// checkout asked to cancel. Guarded by `cancelLock`.
    private let cancelLock = NSLock()
    private var canceller: OpaquePointer?
    private var holder: UInt64 = 0
    private var cancelRequested = false

    /// When the pool last got it back (the pool's lock guards it).
    var lastCheckedIn = ContinuousClock.now

    /// Shown each statement before it runs (the pool's `observer`).
    private let observer: PGPool.Observer?

    init(conninfo: String, statementTimeout: Duration? = nil, observer: PGPool.Observer? = nil) {
        self.conninfo = conninfo
        self.statementTimeout = statementTimeout
        self.observer = observer
    }

    /// A connection dropped while open (its pool was never shut down) is closed here
    /// rather than leaked.
    deinit {
        if let handle { PQfinish(handle) }
    }

    var isConnected: Bool {
        guard let handle else { return false }
        return PQstatus(handle) == CONNECTION_OK
    }

    func connect() throws(PGError) {
        close()
        let connection = PQconnectdb(conninfo)
        guard let connection, PQstatus(connection) == CONNECTION_OK else {
            let message = connection.map { String(cString: PQerrorMessage($0)) } ?? "out of memory"
            PQfinish(connection)
            throw PGError(code: .connection, message: message.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        handle = connection
        prepared = [:]
        cancelLock.withLock { canceller = PQgetCancel(connection) }
        if let statementTimeout {
            let (seconds, attoseconds) = statementTimeout.components
            let milliseconds = seconds * 1000 + attoseconds / 1_000_000_000_000_000
            try execute("SELECT set_config('statement_timeout', \(String(milliseconds)), false)")
        }
    }

    func close() {
        cancelLock.withLock {
            if let canceller { PQfreeCancel(canceller) }
            canceller = nil
        }
        if let handle { PQfinish(handle) }
        handle = nil
        prepared = [:]
    }

    /// Spans and slow-statement warnings for the holder's statements.
    private var tracing: StatementTracing?

    /// The connection is held by checkout `id` until `release()`.
    func hold(_ id: UInt64, tracing: StatementTracing? = nil) {
        self.tracing = tracing
        cancelLock.withLock {
            holder = id
            cancelRequested = false
        }
    }

    func release() {
        tracing = nil
        cancelLock.withLock {
            holder = 0
            cancelRequested = false
        }
    }

    /// Cancels what checkout `id` runs here: the statement in flight (PostgreSQL ends it with
    /// 57014 and the connection stays usable), and every later one of the checkout fails
    /// before it is sent. Does nothing once the connection went back to the pool. Called
    /// from any thread.
    func cancel(holder id: UInt64) {
        cancelLock.withLock {
            guard holder == id else { return }
            cancelRequested = true
            guard let canceller else { return }
            var reason = [CChar](repeating: 0, count: 256)
            _ = PQcancel(canceller, &reason, Int32(reason.count))
        }
    }

    private func checkNotCancelled() throws(PGError) {
        if cancelLock.withLock({ cancelRequested }) {
            throw PGError(code: .cancelled, message: "the statement's task was cancelled")
        }
    }

    /// Runs one statement, its parameters typed and in binary format, and copies its
    /// result out in binary format.
    @discardableResult
    public func execute(_ query: PGQuery) throws(PGError) -> PGRows {
        guard let tracing else { return try run(query) }
        let started = ContinuousClock.now
        let span = tracing.start(query)
        do {
            let rows = try run(query)
            tracing.end(span, query, started: started, error: nil)
            return rows
        } catch {
            tracing.end(span, query, started: started, error: error)
            throw error
        }
    }

    private func run(_ query: PGQuery) throws(PGError) -> PGRows {
        guard let handle else { throw PGError(code: .connection, message: "not connected") }
        try checkNotCancelled()
        observer?(query)
        let binds = query.binds
        guard !binds.invalidText else {
            throw PGError(code: .invalidText, message: "a parameter contains the NUL character")
        }
        let statement = try statementName(for: query.sql, types: binds.types, handle: handle)
        let count = Int32(binds.count)
        let result: OpaquePointer? = binds.bytes.withUnsafeBufferPointer { bytes in
            let base = UnsafeRawPointer(bytes.baseAddress).map { $0.assumingMemoryBound(to: CChar.self) }
            // A NULL's pointer is nil; an empty value's must not be.
            let values: [UnsafePointer<CChar>?] = zip(binds.offsets, binds.lengths).map { offset, length in
                length < 0 ? nil : (base.map { $0 + offset } ?? Self.empty)
            }
            let formats = [Int32](repeating: 1, count: binds.count)
            return binds.lengths.withUnsafeBufferPointer { lengths in
                if let statement {
                    return PQexecPrepared(handle, statement, count, values, lengths.baseAddress, formats, 1)
                }
                return PQexecParams(handle, query.sql, count, binds.types, values, lengths.baseAddress, formats, 1)
            }
        }
        guard let result else {
            throw PGError(code: .connection, message: String(cString: PQerrorMessage(handle)))
        }
        do {
            try Self.check(result, connection: handle)
        } catch {
            PQclear(result)
            throw error
        }
        return PGRows(result)  // which frees the result
    }

    // Read-only after its initialization.
    nonisolated(unsafe) private static let empty: UnsafePointer<CChar> = {
        let pointer = UnsafeMutablePointer<CChar>.allocate(capacity: 1)
        pointer.initialize(to: 0)
        return UnsafePointer(pointer)
    }()

    /// The prepared statement for `sql` with parameters of `types`, preparing it on first
    /// use; nil once the cache is full (dynamic SQL then runs unprepared rather than
    /// growing the server's memory).
    private func statementName(for sql: String, types: [UInt32], handle: OpaquePointer) throws(PGError) -> String? {
        let key = "\(types)\u{0}\(sql)"
        if let name = prepared[key] { return name }
        guard prepared.count < Self.maxPrepared else { return nil }
        let name = "s\(prepared.count)"
        guard let result = PQprepare(handle, name, sql, Int32(types.count), types) else {
            throw PGError(code: .connection, message: String(cString: PQerrorMessage(handle)))
        }
        defer { PQclear(result) }
        try Self.check(result, connection: handle)
        prepared[key] = name
        return name
    }

    /// Throws the error `result` carries, if any.
    private static func check(_ result: OpaquePointer, connection: OpaquePointer) throws(PGError) {
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
            break
        default:
            let field = { (code: UInt8) -> String? in
                PQresultErrorField(result, Int32(code)).map { String(cString: $0) }
            }
            let sqlState = field(UInt8(ascii: "C"))
            let message = field(UInt8(ascii: "M")) ?? String(cString: PQresultErrorMessage(result))
            if sqlState == nil && PQstatus(connection) != CONNECTION_OK {
                throw PGError(code: .connection, message: message)
            }
            throw PGError(code: .server, sqlState: sqlState, message: message)
        }
    }

    /// Runs a script of several statements without parameters: for the project's own
    /// static SQL (migrations, test fixtures) only, never for anything holding input.
    public func executeScript(_ sql: String) throws(PGError) {
        guard let handle else { throw PGError(code: .connection, message: "not connected") }
        guard let result = PQexec(handle, sql) else {
            throw PGError(code: .connection, message: String(cString: PQerrorMessage(handle)))
        }
        defer { PQclear(result) }
        try Self.check(result, connection: handle)
    }

    /// Runs `body` inside BEGIN/COMMIT; any error rolls back and is rethrown.
    public func transaction<T>(_ body: (PGConnection) throws -> T) throws -> T {
        try execute("BEGIN")
        do {
            let value = try body(self)
            try execute("COMMIT")
            return value
        } catch {
            rollBack()
            throw error
        }
    }

    /// Ends the transaction in progress, if any, even after a cancel; a connection whose
    /// transaction cannot be ended is closed (the pool reopens it).
    func rollBack() {
        guard let handle, PQtransactionStatus(handle) != PQTRANS_IDLE else { return }
        if let result = PQexec(handle, "ROLLBACK") { PQclear(result) }
        if PQtransactionStatus(handle) != PQTRANS_IDLE { close() }
    }
}
