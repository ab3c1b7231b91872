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
        if beginPending { return try runPipelined([Self.begin, query], answer: 1) }
        guard let handle else { throw PGError(code: .connection, message: "not connected") }
        try checkNotCancelled()
        let statement = try statementName(for: query, handle: handle)
        observer?(query)
        let result = Self.withParameters(query.binds) { count, values, lengths, formats in
            if let statement {
                return PQexecPrepared(handle, statement, count, values, lengths, formats, 1)
            }
            return PQexecParams(handle, query.sql, count, query.binds.types, values, lengths, formats, 1)
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

    /// Sends `queries` together and waits once (libpq's pipeline mode): one round trip
    /// instead of one each. Returns the rows of `queries[answer]`; throws the first error,
    /// the statements after it not run. The BEGIN pending, if any, goes first.
    private func runPipelined(_ queries: [PGQuery], answer: Int) throws(PGError) -> PGRows {
        guard let handle else { throw PGError(code: .connection, message: "not connected") }
        try checkNotCancelled()
        var statements: [String?] = []
        // Prepared first: a pipeline cannot prepare a statement and wait for it.
        for query in queries {
            statements.append(try statementName(for: query, handle: handle))
            observer?(query)
        }
        beginPending = false
        guard PQenterPipelineMode(handle) == 1 else { throw lost(handle) }
        var sent = true
        for (query, statement) in zip(queries, statements) where sent {
            sent = Self.withParameters(query.binds) { count, values, lengths, formats in
                if let statement {
                    return PQsendQueryPrepared(handle, statement, count, values, lengths, formats, 1)
                }
                return PQsendQueryParams(handle, query.sql, count, query.binds.types, values, lengths, formats, 1)
            } == 1
        }
        guard sent, PQpipelineSync(handle) == 1 else { throw lost(handle) }
        var rows: PGRows?
        var failure: PGError?
        for index in queries.indices {
            guard let result = PQgetResult(handle) else { throw lost(handle) }
            if PQresultStatus(result) == PGRES_PIPELINE_ABORTED {
                PQclear(result)
            } else {
                do {
                    try Self.check(result, connection: handle)
                    if index == answer { rows = PGRows(result) } else { PQclear(result) }
                } catch {
                    PQclear(result)
                    failure = failure ?? error
                }
            }
            // Each statement's results end with a NULL.
            while let more = PQgetResult(handle) { PQclear(more) }
        }
        guard let sync = PQgetResult(handle) else { throw lost(handle) }
        let synced = PQresultStatus(sync) == PGRES_PIPELINE_SYNC
        PQclear(sync)
        guard synced, PQexitPipelineMode(handle) == 1 else { throw lost(handle) }
        if let failure { throw failure }
        guard let rows else { throw PGError(code: .connection, message: "a pipelined statement returned nothing") }
        return rows
    }

    /// The connection broke mid-pipeline: closed (the pool reopens it), with libpq's reason.
    private func lost(_ handle: OpaquePointer) -> PGError {
        let message = String(cString: PQerrorMessage(handle)).trimmingCharacters(in: .whitespacesAndNewlines)
        close()
        return PGError(code: .connection, message: message.isEmpty ? "the connection broke during a pipeline" : message)
    }

    /// Calls libpq with `binds` as it takes them: a count, a pointer to each value (nil
    /// for NULL), their lengths, and every one in binary format.
    private static func withParameters<Result>(
        _ binds: PGBinds,
        _ call: (Int32, [UnsafePointer<CChar>?], UnsafePointer<Int32>?, [Int32]) -> Result
    ) -> Result {
        binds.bytes.withUnsafeBufferPointer { bytes in
            let base = UnsafeRawPointer(bytes.baseAddress).map { $0.assumingMemoryBound(to: CChar.self) }
            // A NULL's pointer is nil; an empty value's must not be.
            let values: [UnsafePointer<CChar>?] = zip(binds.offsets, binds.lengths).map { offset, length in
                length < 0 ? nil : (base.map { $0 + offset } ?? Self.empty)
            }
            let formats = [Int32](repeating: 1, count: binds.count)
            return binds.lengths.withUnsafeBufferPointer { lengths in
                call(Int32(binds.count), values, lengths.baseAddress, formats)
            }
        }
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
    private func statementName(for query: PGQuery, handle: OpaquePointer) throws(PGError) -> String? {
        guard !query.binds.invalidText else {
            throw PGError(code: .invalidText, message: "a parameter contains the NUL character")
        }
        let (sql, types) = (query.sql, query.binds.types)
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
        if beginPending {
            beginPending = false
            try execute(Self.begin)
        }
        guard let result = PQexec(handle, sql) else {
            throw PGError(code: .connection, message: String(cString: PQerrorMessage(handle)))
        }
        defer { PQclear(result) }
        try Self.check(result, connection: handle)
    }

    /// A transaction's BEGIN waits for its first statement and goes with it.
    private var beginPending = false
    /// Whether `executeThenCommit` ended the transaction in progress.
    private var committed = false
    private static let begin: PGQuery = "BEGIN"
    private static let commit: PGQuery = "COMMIT"

    /// Runs `body` inside BEGIN/COMMIT; any error rolls back and is rethrown. BEGIN is sent
    /// with the first statement, and COMMIT with the last when the body ends with
    /// `executeThenCommit`: a transaction of one statement takes one round trip.
    public func transaction<T>(_ body: (PGConnection) throws -> T) throws -> T {
        beginPending = true
        committed = false
        defer { beginPending = false }
        do {
            let value = try body(self)
            if committed {
                committed = false
            } else if !beginPending {
                try execute(Self.commit)
            }
            return value
        } catch {
            committed = false
            rollBack()
            throw error
        }
    }

    /// Runs the transaction's last statement and commits, in one round trip; its rows are
    /// returned once the commit succeeded. The body runs no statement after it. Traced as
    /// both statements, each spanning the round trip.
    @discardableResult
    public func executeThenCommit(_ query: PGQuery) throws(PGError) -> PGRows {
        let started = ContinuousClock.now
        let spans = [query, Self.commit].map { (query: $0, span: tracing?.start($0) ?? nil) }
        do {
            let rows = beginPending
                ? try runPipelined([Self.begin, query, Self.commit], answer: 1)
                : try runPipelined([query, Self.commit], answer: 0)
            committed = true
            for traced in spans { tracing?.end(traced.span, traced.query, started: started, error: nil) }
            return rows
        } catch {
            for traced in spans { tracing?.end(traced.span, traced.query, started: started, error: error) }
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
