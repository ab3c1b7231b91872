import Foundation
import AMQPBridge
import BrokerTopology
import Logging
import PQBridge
import Persistence
import ServiceSupport
import SyncModels

/// What an operator can do about dead letters and queues, in one place for the gateway's
/// admin API and for syncctl. PostgreSQL holds the list (`dead_letters`); the broker's
/// `sync.jobs.dead-letters` holds one parked message per listed dead letter. Every action changes
/// the database first (the truth), then takes the matching messages out of the queue,
/// and is written to the audit log.
public struct DeadLetterOffice: Sendable {
    let deadLetters: DeadLetterStore
    let audit: AuditStore
    let jobs: JobStore
    let fanoutQueues: FanoutQueueStore
    let publisher: AMQPPublisher
    let retryDelays: [Double]
    let logger: Logger
    /// Set once this process found no retired queue left: later calls skip the check.
    private let retiredQueuesGone = Locked(false)

    public init(pool: PGPool, publisher: AMQPPublisher, retryDelays: [Double], logger: Logger) {
        self.deadLetters = DeadLetterStore(pool: pool)
        self.audit = AuditStore(pool: pool)
        self.jobs = JobStore(pool: pool)
        self.fanoutQueues = FanoutQueueStore(pool: pool)
        self.publisher = publisher
        self.retryDelays = retryDelays
        self.logger = logger
    }

    public func list(queue: String = "sync", filter: DeadLetterFilter, limit: Int, cursor: PageCursor?) async throws -> DeadLetterPage {
        try await deadLetters.list(queue: queue, filter: filter, limit: limit, cursor: cursor)
    }

    public func detail(id: DeadLetterID) async throws -> DeadLetterDetail? {
        try await deadLetters.detail(id: id)
    }

    public enum ReplayAnswer: Sendable, Equatable {
        case replayed(jobID: String)
        case notFound
        case namesNoJob
    }

    /// Queues the dead job again with attempts reset and takes its message out of the DLQ.
    public func replay(id: DeadLetterID, actor: String) async throws -> ReplayAnswer {
        let answer = try await replayOne(id)
        if case .replayed(let jobID) = answer {
            await reconcile()
            try await audit.record(actor: actor, action: "replay", target: jobID, count: 1)
        }
        return answer
    }

    private func replayOne(_ id: DeadLetterID) async throws -> ReplayAnswer {
        switch try await deadLetters.replay(id: id) {
        case .notFound: return .notFound
        case .namesNoJob: return .namesNoJob
        case .redeliver(let id, let message):
            // Published first, then taken off the list: a failure leaves it listed (and the
            // caller gets the error); a crash in between only sends one poke twice.
            try await publisher.publish([SynclineTopology.webhookDeliveryMessage(body: Array(message.utf8), attempt: 0)])
            try await deadLetters.remove(id: id)
            return .replayed(jobID: id.description)
        case .resumedFeed(let feedID):
            return .replayed(jobID: feedID)
        case .replayed(let job, let traceID):
            do {
                try await publisher.publish([SynclineTopology.jobMessage(job, traceID: traceID)])
                try await jobs.markPublished([job])
            } catch {
                // Committed as queued and unpublished: the gateway's relay publishes it.
                logger.warning("replayed job not published yet; the relay will", metadata: ["job.id": "\(job.job)", "error": "\(error)"])
            }
            return .replayed(jobID: job.job.description)
        }
    }

    /// Gives up on a dead letter: it leaves the list and the queue; its job says `discarded`.
    public func discard(id: DeadLetterID, actor: String) async throws -> Bool {
        guard try await deadLetters.discard(id: id) else { return false }
        await reconcile()
        try await audit.record(actor: actor, action: "discard", target: id.description, count: 1)
        return true
    }

    /// Replays every dead letter the filter selects (a filter is required); with `dryRun`
    /// only counts them.
    public func bulkReplay(queue: String = "sync", filter: DeadLetterFilter, dryRun: Bool, actor: String) async throws -> BulkReplayResult {
        let ids = try await deadLetters.matching(queue: queue, filter: filter)
        // Each replay is its own transaction and publish: one that fails stops the run, and
        // what was replayed before it stays replayed and is in the audit log.
        var replayed = 0
        if !dryRun {
            do {
                for id in ids {
                    if case .replayed = try await replayOne(id) { replayed += 1 }
                }
            } catch {
                if replayed > 0 { await reconcile() }
                try? await audit.record(actor: actor, action: "bulk_replay", filter: filter, count: replayed)
                throw error
            }
            if replayed > 0 { await reconcile() }
        }
        try await audit.record(
            actor: actor, action: dryRun ? "bulk_replay_dry_run" : "bulk_replay", filter: filter,
            count: dryRun ? ids.count : replayed)
        return BulkReplayResult(matched: ids.count, replayed: replayed)
    }

    public func auditLog(limit: Int) async throws -> [AuditEntry] {
        try await audit.recent(limit: limit)
    }

    /// Depth and consumers of every queue of the job pipeline.
    public func queues() async throws -> [QueueView] {
        // Replica queues refreshed in the last 90 s: they outlive their replica by 120 s.
        let replicas = try await fanoutQueues.live(within: 90)
        return try await publisher.queueStats(SynclineTopology.queueNames(retryDelays: retryDelays) + replicas)
            .map { QueueView(name: $0.name, messages: $0.messages, consumers: $0.consumers) }
    }

    public func jobRates(minutes: Int) async throws -> JobRates {
        try await jobs.rates(minutes: minutes)
    }

    /// Moves what the classic dead-letter queues of an earlier release hold into the queues
    /// that replaced them, then deletes them. Nothing is lost in between: both are bound
    /// with the same routing key, so while the old one exists every new dead letter reaches
    /// the new one too, and a message leaves the old one only once the new one confirmed it.
    /// A broker that cannot be reached leaves them for the next run.
    /// Once none is left, this process does not look again (an earlier release still
    /// running could declare one anew, but what reaches it reaches its replacement too).
    public func moveRetiredQueues() async {
        guard !retiredQueuesGone.withLock({ $0 }) else { return }
        var allGone = true
        for (retired, replacement) in SynclineTopology.retiredDeadLetterQueues {
            do {
                guard try await publisher.queueStatsIfPresent(retired) != nil else { continue }
                let moved = try await publisher.moveMessages(from: retired, to: replacement)
                try await publisher.deleteQueue(retired)
                logger.notice("moved a retired dead-letter queue", metadata: [
                    "amqp.queue": "\(retired)", "amqp.destination": "\(replacement)", "messages.moved": "\(moved)",
                ])
            } catch {
                allGone = false
                logger.warning("could not move a retired dead-letter queue", metadata: ["amqp.queue": "\(retired)", "error": "\(error)"])
            }
        }
        if allGone { retiredQueuesGone.withLock { $0 = true } }
    }

    /// Makes each dead-letter queue (`sync.jobs.dead-letters`, `notify.dead-letters`) hold exactly one
    /// message per listed dead letter: messages of dead letters replayed or discarded, and
    /// second copies (a worker that died between recording and acking parks again), are
    /// taken out. A broker that cannot be reached leaves them for the next action; the
    /// list stays right meanwhile.
    @discardableResult
    public func reconcile() async -> SweepResult? {
        await moveRetiredQueues()
        var total = SweepResult(examined: 0, removed: 0)
        for (queue, name) in [("sync", SynclineTopology.deadLetterQueue), ("notify", SynclineTopology.notifyDeadLetterQueue)] {
            do {
                let listed = try await deadLetters.ids(queue: queue)
                let seen = Locked(Set<String>())
                let result = try await publisher.sweep(queue: name) { message in
                    let id = SynclineTopology.deadLetterID(of: message)
                    return !listed.contains(id) || !seen.withLock { $0.insert(id).inserted }
                }
                if result.removed > 0 {
                    logger.info("took acted-on messages out of a dead-letter queue", metadata: [
                        "amqp.queue": "\(name)", "messages.removed": "\(result.removed)",
                    ])
                }
                total.examined += result.examined
                total.removed += result.removed
            } catch {
                logger.warning("could not reconcile a dead-letter queue", metadata: ["amqp.queue": "\(name)", "error": "\(error)"])
                return nil
            }
        }
        return total
    }
}
