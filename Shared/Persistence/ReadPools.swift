import Logging
import Metrics
import NIOConcurrencyHelpers
import PQBridge

/// Where the reads a streaming replica may answer go (`DATABASE_READ_URL`): pulls and
/// public reads. Everything else, and every write, uses `primary`.
///
/// A replica replays the primary's commits in their order, so each snapshot it takes is
/// one the primary had: a pull answered there is consistent with its own cursor, only
/// older. When the replica cannot answer (unreachable, or a statement cancelled by a
/// conflict with recovery), or its answer is too old for the caller (`acceptable`), the
/// primary answers instead; after a failure the replica is left alone for `restAfterFailure`,
/// so a replica that is down costs each read nothing (one that no longer answers at all
/// would cost each a connect timeout).
public struct ReadPools: Sendable {
    public let primary: PGPool
    public let replica: PGPool?
    let logger: Logger
    static let restAfterFailure = Duration.seconds(5)
    /// Until when reads skip the replica after it failed one.
    private let resting = NIOLockedValueBox<ContinuousClock.Instant?>(nil)

    public init(primary: PGPool, replica: PGPool? = nil, logger: Logger = Logger(label: "syncline.reads")) {
        self.primary = primary
        self.replica = replica
        self.logger = logger
    }

    /// `body`'s answer from the replica when there is one and its answer is `acceptable`,
    /// else from the primary.
    public func read<T: Sendable>(
        acceptable: (T) -> Bool = { _ in true }, _ body: (PGPool) async throws -> T
    ) async throws -> T {
        guard let replica, !isResting else { return try await body(primary) }
        do {
            let answer = try await body(replica)
            if acceptable(answer) {
                ReplicaMetrics.answered.increment()
                return answer
            }
            ReplicaMetrics.behind.increment()
        } catch let error as PGError where error.isRetryable {
            ReplicaMetrics.failed.increment()
            resting.withLockedValue { $0 = .now + Self.restAfterFailure }
            logger.debug("the replica did not answer a read; the primary does", metadata: ["error": "\(error)"])
        }
        return try await body(primary)
    }

    private var isResting: Bool {
        resting.withLockedValue { until in until.map { $0 > .now } ?? false }
    }
}

/// `syncline_replica_reads_total{outcome}`, made once: every pull passes here.
enum ReplicaMetrics {
    static let answered = reads("replica")
    /// The replica had not replayed as far as the caller needed.
    static let behind = reads("replica_behind")
    static let failed = reads("replica_failed")

    private static func reads(_ outcome: String) -> Counter {
        Counter(label: "syncline_replica_reads_total", dimensions: [("outcome", outcome)])
    }
}
