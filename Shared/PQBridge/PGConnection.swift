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

    init(conninfo: String) {
        self.conninfo = conninfo
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
    }

    func close() {
        if let handle { PQfinish(handle) }
        handle = nil
        prepared = [:]
    }

    /// Runs one parameterized statement and copies its result out.
    @discardableResult
    public func query(_ sql: String, _ parameters: [(any PGBindable)?] = []) throws(PGError) -> PGResult {
        guard let handle else { throw PGError(code: .connection, message: "not connected") }
        let texts: [String?] = parameters.map { $0?.pgText }
        let cStrings: [UnsafeMutablePointer<CChar>?] = texts.map { $0.flatMap { strdup($0) } }
        defer { cStrings.forEach { free($0) } }
        // libpq takes C strings: a NUL would silently cut the text (the copy ends there,
        // shorter than the text). Refuse it instead.
        for (text, copy) in zip(texts, cStrings) where text.map({ strlen(copy!) != $0.utf8.count }) == true {
            throw PGError(code: .invalidText, message: "a parameter contains the NUL character")
        }
        let statement = try statementName(for: sql, parameterCount: texts.count, handle: handle)
        let result: OpaquePointer? = cStrings.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: UnsafePointer<CChar>?.self) { values in
                if let statement {
                    return PQexecPrepared(handle, statement, Int32(texts.count), values.baseAddress, nil, nil, 0)
                }
                return PQexecParams(handle, sql, Int32(texts.count), nil, values.baseAddress, nil, nil, 0)
            }
        }
        guard let result else {
            throw PGError(code: .connection, message: String(cString: PQerrorMessage(handle)))
        }
        defer { PQclear(result) }
        return try Self.read(result, connection: handle)
    }

    /// The prepared statement for `sql`, preparing it on first use; nil once the cache is
    /// full (dynamic SQL then runs unprepared rather than growing the server's memory).
    private func statementName(for sql: String, parameterCount: Int, handle: OpaquePointer) throws(PGError) -> String? {
        if let name = prepared[sql] { return name }
        guard prepared.count < Self.maxPrepared else { return nil }
        let name = "s\(prepared.count)"
        guard let result = PQprepare(handle, name, sql, Int32(parameterCount), nil) else {
            throw PGError(code: .connection, message: String(cString: PQerrorMessage(handle)))
        }
        defer { PQclear(result) }
        _ = try Self.read(result, connection: handle)
        prepared[sql] = name
        return name
    }

    private static func read(_ result: OpaquePointer, connection: OpaquePointer) throws(PGError) -> PGResult {
        let status = PQresultStatus(result)
        switch status {
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
        let columnCount = Int(PQnfields(result))
        let rowCount = Int(PQntuples(result))
        let columns = (0..<columnCount).map { String(cString: PQfname(result, Int32($0))) }
        var rows: [PGRow] = []
        rows.reserveCapacity(rowCount)
        for row in 0..<rowCount {
            var values: [String?] = []
            values.reserveCapacity(columnCount)
            for column in 0..<columnCount {
                if PQgetisnull(result, Int32(row), Int32(column)) == 1 {
                    values.append(nil)
                } else {
                    values.append(String(cString: PQgetvalue(result, Int32(row), Int32(column))))
                }
            }
            rows.append(PGRow(columns: columns, values: values))
        }
        let affected = Int(String(cString: PQcmdTuples(result))) ?? 0
        return PGResult(columns: columns, rows: rows, affectedRows: affected)
    }

    /// Runs a script of several statements without parameters: for the project's own
    /// static SQL (migrations, test fixtures) only, never for anything holding input.
    public func executeScript(_ sql: String) throws(PGError) {
        guard let handle else { throw PGError(code: .connection, message: "not connected") }
        guard let result = PQexec(handle, sql) else {
            throw PGError(code: .connection, message: String(cString: PQerrorMessage(handle)))
        }
        defer { PQclear(result) }
        _ = try Self.read(result, connection: handle)
    }

    /// Runs `body` inside BEGIN/COMMIT; any error rolls back and is rethrown.
    public func transaction<T>(_ body: (PGConnection) throws -> T) throws -> T {
        try query("BEGIN")
        do {
            let value = try body(self)
            try query("COMMIT")
            return value
        } catch {
            _ = try? query("ROLLBACK")
            throw error
        }
    }
}
