import AMQPBridge
import Persistence
import PQBridge
import ServiceSupport
import SyncModels

/// What a failed job attempt means — decided here and nowhere else.
///
/// - `outage`: PostgreSQL cannot be reached (connection refused or lost, the server shutting
///   down or starting, too many connections). The job is not at fault, so the attempt is
///   not counted: the worker waits for the database and hands the job back. An outage
///   longer than the whole backoff schedule therefore never turns good jobs into dead ones.
/// - `transient`: worth another attempt after the next retry delay (serialization failure,
///   deadlock, lock timeout, the broker failing us). Counts towards `MAX_ATTEMPTS` — except
///   a deadlock, which the worker first retries at once within the same attempt
///   (`isDeadlock`): PostgreSQL chose this transaction as the victim, not the job.
///   A hook (the app's backend) that does not answer a job's calls is transient too.
/// - `permanent`: another attempt cannot help (stored ops that cannot be read, any other
///   database error); dead-lettered at once with the reason.
public enum JobFailure: Equatable, Sendable {
    case outage(reason: String)
    case transient(reason: String)
    case permanent(reason: String)

    /// The label used in logs, metrics and dead-letter headers.
    public var reason: String {
        switch self {
        case .outage(let reason), .transient(let reason), .permanent(let reason): return reason
        }
    }

    /// PostgreSQL broke a deadlock by aborting this transaction.
    public static func isDeadlock(_ error: any Error) -> Bool {
        (error as? PGError)?.conflict == .deadlock
    }

    public static func classify(_ error: any Error) -> JobFailure {
        switch error {
        case let error as ApplyError:
            switch error {
            case .recordsGoneAtWrite: return .transient(reason: "records_gone")
            }
        case is UnreadableJob:
            return .permanent(reason: "invalid_payload")
        case is HookFailure:
            return .transient(reason: "hook")
        case let error as PGError:
            if error.isUnavailable { return .outage(reason: "database_unavailable") }
            if let conflict = error.conflict { return .transient(reason: conflict.rawValue) }
            // A worker of a newer build than the schema: retried by tier, so the job is
            // applied once the migration has run instead of dying at once.
            if error.isSchemaBehind { return .transient(reason: "schema_not_migrated") }
            switch error.sqlState {
            case let state? where error.isRetryable: return .transient(reason: "database_\(state)")
            case _ where error.code == .decoding: return .permanent(reason: "invalid_payload")
            case let state?: return .permanent(reason: "database_error_\(state)")
            case nil: return .permanent(reason: "database_error")
            }
        case is AMQPError:  // every broker failure passes: the connection is reopened
            return .transient(reason: "broker")
        case is CancellationError:
            return .outage(reason: "shutting_down")
        default:
            return .permanent(reason: "internal_error")
        }
    }
}

/// A job whose stored ops cannot be read as ops: no attempt can apply it.
public struct UnreadableJob: Error, CustomStringConvertible {
    public let jobID: JobID

    public init(jobID: JobID) {
        self.jobID = jobID
    }

    public var description: String { "job \(jobID) holds ops that cannot be read" }
}

/// What becomes of a job's delivery after one of its attempts failed — decided here and
/// nowhere else; the consumer carries it out.
public enum JobSettlement: Equatable, Sendable {
    /// Handed back to its queue with the attempt not counted (the database is out, or the
    /// worker is stopping): the job was not at fault.
    case handBack
    /// The failed attempt is recorded and the job waits in its tier's retry queue.
    case retry
    /// The failed attempt is recorded and the job is dead-lettered with this reason.
    case deadLetter(DeadLetterReason)

    /// After attempt number `attempt` (counted from 1) failed with `failure`.
    public static func after(_ failure: JobFailure, attempt: Int, maxAttempts: Int) -> JobSettlement {
        switch failure {
        case .outage: .handBack
        case .transient where attempt < maxAttempts: .retry
        case .transient: .deadLetter(.maxAttempts)
        case .permanent(let reason): .deadLetter(DeadLetterReason(rawValue: reason))
        }
    }
}
