/// A failure from PostgreSQL or from talking to it, classified once: retryable failures
/// (lost connection, serialization failure, deadlock, lock timeout, server shutting down
/// or starting) are worth trying again; everything else is permanent.
public struct PGError: Error, CustomStringConvertible, CustomDebugStringConvertible, Sendable {
    public enum Code: Sendable, Equatable {
        /// No connection could be made, or it was lost mid-call.
        case connection
        /// The server answered with an error (see `sqlState`).
        case server
        /// A result could not be read as the caller expected.
        case decoding
        /// The pool is shut down.
        case closed
        /// A text parameter holds NUL, which PostgreSQL text cannot store; nothing was sent.
        case invalidText
        /// No connection of the pool came free within its acquisition timeout.
        case timeout
        /// The task waiting for the statement was cancelled; the statement was cancelled too.
        case cancelled
        /// The transaction committed, but no standby confirmed it in time: it may yet be
        /// lost with this server (see `PGPool`'s `standbyWait`).
        case unconfirmed
    }

    public let code: Code
    public let sqlState: String?
    public let message: String

    public init(code: Code, sqlState: String? = nil, message: String) {
        self.code = code
        self.sqlState = sqlState
        self.message = message
    }

    /// A statement that lost to another transaction: the same statement may well succeed
    /// the next time. (The one list of these SQLSTATEs.)
    public enum Conflict: String, Sendable {
        case serializationFailure = "serialization_failure"
        case deadlock
        case lockNotAvailable = "lock_not_available"
    }

    static let conflicts: [String: Conflict] = [
        SQLState.serializationFailure: .serializationFailure, SQLState.deadlockDetected: .deadlock,
        SQLState.lockNotAvailable: .lockNotAvailable,
    ]
    /// A row that another transaction inserted first (unique_violation).
    public var isUniqueViolation: Bool { code == .server && sqlState == SQLState.uniqueViolation }

    /// A write refused because the server is read-only (read_only_sql_transaction): the
    /// connection reached a standby, or a primary that has since been demoted.
    public var isReadOnlyServer: Bool { code == .server && sqlState == SQLState.readOnlySQLTransaction }

    /// The schema lacks a table, column or function this build uses (undefined_table,
    /// undefined_column, undefined_function): the database was not migrated to this build.
    public var isSchemaBehind: Bool {
        code == .server && [SQLState.undefinedTable, SQLState.undefinedColumn, SQLState.undefinedFunction].contains(sqlState ?? "")
    }

    /// The server shutting down or starting, or out of connection slots.
    static let serverUnavailableStates: Set<String> = [
        SQLState.adminShutdown, SQLState.crashShutdown, SQLState.cannotConnectNow, SQLState.tooManyConnections,
    ]

    /// The conflict this error reports, if it is one.
    public var conflict: Conflict? {
        guard code == .server, let sqlState else { return nil }
        return Self.conflicts[sqlState]
    }

    public var isRetryable: Bool {
        switch code {
        case .connection, .timeout, .unconfirmed: return true
        case .server:
            guard let sqlState else { return false }
            return sqlState.hasPrefix("08") || Self.serverUnavailableStates.contains(sqlState) || conflict != nil
                || isReadOnlyServer
        case .decoding, .closed, .invalidText, .cancelled: return false
        }
    }

    /// The database is unreachable (as opposed to refusing one statement).
    public var isUnavailable: Bool {
        code == .connection || code == .closed || code == .timeout || code == .unconfirmed
            || (sqlState.map { $0.hasPrefix("08") || $0.hasPrefix("57P") || $0 == SQLState.tooManyConnections } ?? false)
            || isReadOnlyServer
    }

    /// What failed; for a connection, libpq's reason too (`database "x" does not exist`,
    /// `Connection refused`), which is what an operator acts on.
    public var description: String {
        switch code {
        case .connection: return "database connection failed: \(message)"
        case .server: return "database error \(sqlState ?? "?")"
        case .decoding: return "unexpected database result"
        case .closed: return "database pool closed"
        case .invalidText: return "text parameter contains NUL"
        case .timeout: return "no database connection free: \(message)"
        case .cancelled: return "database statement cancelled"
        case .unconfirmed: return "commit not confirmed by a standby: \(message)"
        }
    }

    /// With libpq's or the server's own words (a connection failure's description has them already).
    public var debugDescription: String { code == .connection ? description : "\(description): \(message)" }
}

/// The SQLSTATEs Syncline acts on, by PostgreSQL's names (its appendix "PostgreSQL Error
/// Codes"): the one list of them. Classes `08` (connection exceptions) and `57P`
/// (operator intervention) are matched by prefix.
public enum SQLState {
    public static let uniqueViolation = "23505"
    public static let readOnlySQLTransaction = "25006"
    public static let serializationFailure = "40001"
    public static let deadlockDetected = "40P01"
    public static let undefinedColumn = "42703"
    public static let undefinedFunction = "42883"
    public static let undefinedTable = "42P01"
    public static let tooManyConnections = "53300"
    public static let lockNotAvailable = "55P03"
    public static let adminShutdown = "57P01"
    public static let crashShutdown = "57P02"
    public static let cannotConnectNow = "57P03"
}
