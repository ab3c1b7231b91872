import AMQPBridge
import BrokerTopology
import Foundation
import Logging
import Metrics
import Persistence
import PQBridge
import ServiceLifecycle
import ServiceSupport
import SyncModels
import Tracing

/// Takes job messages off `sync.jobs` and applies each job in PostgreSQL, acking only
/// after the applying transaction committed. The message only names the job: the user,
/// device and ops come from the job row. Every delivery is settled exactly once:
///
/// - applied (or already finished) → ack;
/// - failed transiently → the attempt is recorded, a copy waits in the retry queue of its
///   tier (`sync.retry.<delay>`, which dead-letters back to `sync.jobs`), then ack;
/// - failed `MAX_ATTEMPTS` times, permanently, or not a job at all → recorded as a dead
///   letter (the job `dead`), parked in `sync.jobs.dead-letters` with a confirm, then ack;
/// - PostgreSQL unreachable → wait for it, take the attempt back, hand the message back.
///
/// It also consumes `sync.jobs.exhausted`, where the broker puts a message it redelivered
/// past the queue's delivery limit (workers dying on it), and dead-letters those jobs.
struct JobConsumer: Service {
    let jobs: AMQPConsumer
    let exhausted: AMQPConsumer
    let database: PGPool
    let store: ApplyStore
    /// The app's rules, which judge every op when it is applied.
    let rules: RulesCache
    /// Asks the app's backend about calls.
    let hooks: HookCaller
    let deadLetters: DeadLetterStore
    let accounts: AccountStore
    let publisher: AMQPPublisher
    /// Job events go out through it, after the commit and off the job's slot.
    let announcer: EventAnnouncer
    let configuration: Configuration
    let settings: WorkerSettings
    let logger: Logger

    private let processed = Counter(label: "syncline_jobs_processed_total", dimensions: [("outcome", "succeeded")])
    private let duplicates = Counter(label: "syncline_jobs_processed_total", dimensions: [("outcome", "already_finished")])
    private let outageWaits = Counter(label: "syncline_job_outage_waits_total")
    private let pushToApplied = Timer(label: "syncline_push_to_applied_seconds")
    private let batchSizes = Recorder(label: "syncline_job_batch_size")
    private let batchOps = Recorder(label: "syncline_job_batch_ops")
    private let batchFallbacks = Counter(label: "syncline_job_batch_fallbacks_total")
    private let deadlockRetries = Counter(label: "syncline_job_deadlock_retries_total")

    func run() async throws {
        for reason in DeadLetterReason.ofJobs { Counter(label: "syncline_dead_letters_total", dimensions: [("reason", reason.rawValue)]).increment(by: 0) }
        jobs.start()
        exhausted.start()
        await withGracefulShutdownHandler {
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    await jobs.handleInBatches(
                        maxBatch: settings.batchJobs, maxWeight: settings.batchOps,
                        slots: settings.concurrency, weight: SynclineTopology.opCount(inMessage:)
                    ) { await handle(batch: $0) }
                }
                group.addTask { await exhausted.handleConcurrently(limit: 4) { await handleExhausted($0) } }
            }
        } onGracefulShutdown: {
            logger.info("stopping: no new jobs, finishing in-flight ones")
            jobs.stopConsuming()
            exhausted.stopConsuming()
        }
        await jobs.close()
        await exhausted.close()
        logger.info("job consumer stopped")
    }

    /// Deliveries from `sync.jobs` that arrived together (one, under a light load): applied
    /// in one transaction that also counts their attempts, and acked after its commit. A
    /// delivery whose job that cannot settle, and every delivery of a batch that failed,
    /// is tried alone (`handleAlone`) on the same applying code: a poison job is
    /// dead-lettered alone while the others are applied.
    func handle(batch deliveries: [AMQPDelivery]) async {
        let started = ContinuousClock.now
        await Traces.batch(
            "process \(SynclineTopology.jobsQueue)", members: deliveries.map(Traces.context(of:)), kind: .consumer,
            attributes: Self.consumeAttributes
        ) { contexts in
            await handle(batch: deliveries, contexts: contexts)
        }
        let took = ContinuousClock.now - started
        if took > configuration.slowThreshold {
            logger.warning("slow apply batch", metadata: [
                "jobs.count": "\(deliveries.count)", "seconds": "\(Double(took.components.seconds) + Double(took.components.attoseconds) / 1e18)",
                "ops.count": "\(deliveries.map(SynclineTopology.opCount(inMessage:)).reduce(0, +))",
            ])
        }
    }

    static let consumeAttributes: SpanAttributes = [
        "messaging.system": "rabbitmq", "messaging.operation.type": "process",
        "messaging.destination.name": .string(SynclineTopology.jobsQueue),
    ]

    /// `contexts`: each delivery's, within the batch's trace.
    private func handle(batch deliveries: [AMQPDelivery], contexts: [ServiceContext]) async {
        batchSizes.record(deliveries.count)
        batchOps.record(deliveries.map(SynclineTopology.opCount(inMessage:)).reduce(0, +))
        // Each message's job, read once; a delivery without one is handled alone below.
        let named: [(AMQPDelivery, JobRef?)]
        let outcomes: [JobID: ApplyStore.Outcome]
        do {
            let jobs = try await resolve(deliveries.map { SynclineTopology.job(inMessage: $0.body) })
            named = Array(zip(deliveries, jobs))
            outcomes = try await store.apply(
                jobs: jobs.compactMap { $0 }, attempt: .countedInCommit, rules: try await rules.rules(), adopt: rules.adopt)
        } catch {
            batchFallbacks.increment()
            logger.info("batch rolled back; applying its jobs one by one", metadata: [
                "jobs.count": "\(deliveries.count)", "error": "\((error as? PGError)?.debugDescription ?? "\(error)")",
            ])
            for delivery in deliveries { await handleAlone(delivery) }
            return
        }
        var events: [(event: JobEvent, context: ServiceContext)] = []
        var settled = Set<JobID>()
        for ((delivery, job), context) in zip(named, contexts) {
            switch job.flatMap({ outcomes[$0.job] }) {
            case .applied(let applied)? where settled.insert(job!.job).inserted:
                events += settleApplied(delivery, jobID: job!.job, applied).map { (event: $0, context: context) }
            case .applied?, .alreadyFinished?:
                duplicates.increment()
                jobs.ack(delivery)
            case .unknownJob?, .unreadable?, .needsHooks?, nil:
                await handleAlone(delivery)
            }
        }
        announcer.send(events)
    }

    /// Acks an applied job's delivery and counts it; returns its events, for after the
    /// other jobs of its batch are settled too.
    private func settleApplied(_ delivery: AMQPDelivery, jobID: JobID, _ applied: ApplyStore.Applied) -> [JobEvent] {
        jobs.ack(delivery)
        processed.increment()
        pushToApplied.recordSeconds(applied.secondsSinceIntake)
        return Self.events(jobID: jobID, applied)
    }

    /// One event per member of the space (the pusher's carries the outcome for the origin
    /// device); members removed before the commit get none. A pusher removed since intake
    /// still learns the outcome, with no cursor to poke their other devices with.
    static func events(jobID: JobID, _ applied: ApplyStore.Applied) -> [JobEvent] {
        var events = applied.members.map { member in
            JobEvent(
                userID: member, deviceID: applied.deviceID, jobID: jobID, status: .succeeded,
                checkpoint: String(applied.checkpoint), hasRefusedOps: member == applied.user && applied.hadRejectsOrConflicts,
                spaceID: applied.space)
        }
        if !applied.members.contains(applied.user) {
            events.append(JobEvent(
                userID: applied.user, deviceID: applied.deviceID, jobID: jobID, status: .succeeded, checkpoint: nil,
                hasRefusedOps: true, spaceID: applied.space))
        }
        return events
    }

    /// One delivery tried on its own, as a batch of one whose attempt is begun in a commit
    /// of its own first, so that a failing attempt counts: retries, dead-lettering and
    /// outages are handled here.
    func handleAlone(_ delivery: AMQPDelivery) async {
        await Traces.batch("apply \(SynclineTopology.jobsQueue) job", members: [Traces.context(of: delivery)]) { _ in
            await applyAlone(delivery)
        }
    }

    private func applyAlone(_ delivery: AMQPDelivery) async {
        guard let named = SynclineTopology.job(inMessage: delivery.body) else {
            await park(delivery, from: jobs, jobID: nil, reason: .invalidMessage, error: "the message does not name a job")
            return
        }
        let jobID = named.id
        var logger = self.logger
        logger[metadataKey: "job.id"] = "\(jobID)"

        let job: JobRef
        let attempt: Int
        do {
            guard let found = try await resolve([named])[0] else {
                await settleFinishedOrUnknown(delivery, from: jobs, jobID: jobID, status: nil, logger: logger)
                return
            }
            job = found
            guard let started = try await store.beginAttempt(job) else {
                let status = try await store.status(job)
                await settleFinishedOrUnknown(delivery, from: jobs, jobID: jobID, status: status, logger: logger)
                return
            }
            attempt = started
        } catch {
            // Nothing was recorded, so no attempt was spent.
            await handBack(delivery, to: jobs, error: error, logger: logger)
            return
        }

        do {
            var outcome = try await applyRetryingDeadlocks(job, logger: logger)
            if case .needsHooks(let work) = outcome {
                // Asked outside any transaction (by the rules the apply just read); the job is
                // then applied with the answers.
                let verdicts = try await hooks.verdicts(for: work, rules: try await rules.rules())
                outcome = try await applyRetryingDeadlocks(job, hookVerdicts: verdicts, logger: logger)
            }
            switch outcome {
            case .needsHooks:
                throw HookFailure(description: "the job still had unanswered calls")
            case .applied(let applied):
                logger.debug("job applied", metadata: ["job.checkpoint": "\(applied.checkpoint)", "job.attempt": "\(attempt)"])
                announcer.send(settleApplied(delivery, jobID: job.job, applied))
            case .alreadyFinished:
                duplicates.increment()
                jobs.ack(delivery)
            case .unknownJob:
                await settleUnknown(delivery, from: jobs, jobID: jobID)
            case .unreadable:
                throw UnreadableJob(jobID: jobID)
            }
        } catch {
            let failure = JobFailure.classify(error)
            let message = (error as? PGError)?.debugDescription ?? "\(error)"
            switch JobSettlement.after(failure, attempt: attempt, maxAttempts: configuration.maxAttempts) {
            case .handBack:
                await handBack(delivery, to: jobs, error: error, releasingAttemptOf: job, logger: logger)
            case .retry:
                try? await store.failAttempt(job, error: message)
                await retryLater(delivery, job: job, attempt: attempt, failure: failure, error: message, logger: logger)
            case .deadLetter(let reason):
                try? await store.failAttempt(job, error: message)
                await park(delivery, from: jobs, jobID: jobID, reason: reason, error: message)
            }
        }
    }

    /// Applies a job alone whose attempt is begun. A deadlock — PostgreSQL aborting this
    /// transaction to let another go on (two users forking each other's records at once,
    /// say) — is no fault of the job: it is tried again at once, up to
    /// `deadlocksPerAttempt` times, within the same attempt.
    private func applyRetryingDeadlocks(
        _ job: JobRef, hookVerdicts: [String: HookExchange.Verdict]? = nil, logger: Logger
    ) async throws -> ApplyStore.Outcome {
        var deadlocks = 0
        while true {
            do {
                return try await store.apply(
                    jobs: [job], attempt: .begun, rules: try await rules.rules(),
                    hookVerdicts: hookVerdicts.map { [job.job: $0] } ?? [:], adopt: rules.adopt
                )[job.job] ?? .unknownJob
            } catch where JobFailure.isDeadlock(error) && deadlocks < Self.deadlocksPerAttempt {
                deadlocks += 1
                deadlockRetries.increment()
                logger.info("deadlock; applying the job again within its attempt", metadata: ["deadlocks": "\(deadlocks)"])
            }
        }
    }

    /// How many deadlocks in a row one attempt absorbs before the next counts as a failure.
    static let deadlocksPerAttempt = 3

    /// One delivery from `sync.jobs.exhausted`: the broker gave up redelivering it.
    func handleExhausted(_ delivery: AMQPDelivery) async {
        guard let named = SynclineTopology.job(inMessage: delivery.body) else {
            await park(delivery, from: exhausted, jobID: nil, reason: .invalidMessage, error: "the message does not name a job")
            return
        }
        let jobID = named.id
        do {
            let job = try await resolve([named])[0]
            var status: JobStatus?
            if let job { status = try await store.status(job) }
            switch status {
            case let status where status?.isTerminal ?? true:
                await settleFinishedOrUnknown(delivery, from: exhausted, jobID: jobID, status: status, logger: logger)
            default:
                let error = "the broker redelivered the message \(SynclineTopology.deliveryLimit) times without an ack"
                if let job { try await store.failAttempt(job, error: error) }
                await park(delivery, from: exhausted, jobID: jobID, reason: .deliveryLimit, error: error)
            }
        } catch {
            await handBack(delivery, to: exhausted, error: error, logger: logger)
        }
    }

    /// A delivery for a job that is terminal or unknown: a duplicate is acked, an unknown
    /// job is dead-lettered, and a dead job is made sure to be parked (a worker may have
    /// died between recording it and parking its message; a second copy is harmless, the
    /// admin tools keep one).
    private func settleFinishedOrUnknown(
        _ delivery: AMQPDelivery, from consumer: AMQPConsumer, jobID: JobID, status: JobStatus?, logger: Logger
    ) async {
        do {
            switch status {
            case nil:
                await settleUnknown(delivery, from: consumer, jobID: jobID)
            case .dead?:
                // A job's dead letter has the job's id.
                if let parked = try await deadLetters.detail(id: DeadLetterID(jobID.uuid))?.item {
                    await park(delivery, from: consumer, jobID: jobID, reason: DeadLetterReason(rawValue: parked.reason), error: parked.lastError ?? "")
                } else {
                    consumer.ack(delivery)  // its dead letter has passed DEAD_LETTER_RETENTION
                }
            case let status?:
                logger.debug("job already finished; acking duplicate delivery", metadata: ["job.status": "\(status.rawValue)"])
                duplicates.increment()
                consumer.ack(delivery)
            }
        } catch {
            await handBack(delivery, to: consumer, error: error, logger: logger)
        }
    }

    /// Sends the job to wait in its tier's retry queue (confirmed), then acks this copy.
    /// A small random hold first spreads out jobs that failed together, without mixing
    /// TTLs inside one queue.
    private func retryLater(
        _ delivery: AMQPDelivery, job: JobRef, attempt: Int, failure: JobFailure, error: String, logger: Logger
    ) async {
        let (queue, delay) = SynclineTopology.retryQueue(afterAttempt: attempt, delays: configuration.retryDelays)
        Counter(label: "syncline_job_retries_total", dimensions: [("reason", failure.reason)]).increment()
        logger.warning("job failed transiently; retrying", metadata: [
            "error": "\(error)", "job.attempt": "\(attempt)", "retry.queue": "\(queue)",
        ])
        let jitter = Double.random(in: 0...min(delay * 0.1, 1))
        if !(await pause(seconds: jitter)) {
            jobs.reject(delivery, requeue: true)
            return
        }
        do {
            try await publisher.publish([SynclineTopology.retryMessage(
                queue: queue, job: job, attempt: attempt, traceID: delivery.header(SynclineTopology.Header.trace),
                ops: SynclineTopology.opCount(inMessage: delivery))])
            jobs.ack(delivery)
        } catch {
            // The broker is in trouble: the message goes back (its attempt stays counted).
            logger.warning("cannot reach the retry queue; handing the message back", metadata: ["error": "\(error)"])
            _ = await pause(seconds: configuration.retryDelays[0])
            jobs.reject(delivery, requeue: true)
        }
    }

    /// Records the dead letter (the job `dead`), parks the message in `sync.jobs.dead-letters` with
    /// a confirm, then acks — so a dead letter is never only in one place for long, and
    /// never lost.
    /// A message naming no job row: a job erased with its account is dropped (it must not
    /// be applied, and it is no operator's concern); any other is dead-lettered.
    private func settleUnknown(_ delivery: AMQPDelivery, from consumer: AMQPConsumer, jobID: JobID) async {
        do {
            if try await accounts.wasForgotten(jobID) {
                logger.info("dropped a job of a deleted account", metadata: ["job.id": "\(jobID)"])
                consumer.ack(delivery)
                return
            }
        } catch {
            await handBack(delivery, to: consumer, error: error, logger: logger)
            return
        }
        await park(delivery, from: consumer, jobID: jobID, reason: .unknownJob, error: "no job row with this id")
    }

    private func park(_ delivery: AMQPDelivery, from consumer: AMQPConsumer, jobID: JobID?, reason: DeadLetterReason, error: String) async {
        let id = SynclineTopology.deadLetterID(jobID: jobID, body: delivery.body)
        do {
            guard let recorded = try await deadLetters.record(
                id: id, namedJobID: jobID, reason: reason.rawValue, error: error, message: String(decoding: delivery.body, as: UTF8.self))
            else {
                consumer.ack(delivery)  // it succeeded meanwhile: nothing to park
                return
            }
            try await publisher.publish([SynclineTopology.deadLetterMessage(
                id: id, jobID: jobID, body: delivery.body, reason: reason.rawValue, error: error, attempts: recorded.attempts,
                traceID: delivery.header(SynclineTopology.Header.trace))])
            Counter(label: "syncline_dead_letters_total", dimensions: [("reason", reason.rawValue)]).increment()
            logger.error("dead-lettered a message", metadata: [
                "job.id": "\(jobID.map(\.description) ?? "-")", "reason": "\(reason.rawValue)", "error": "\(error)", "job.attempts": "\(recorded.attempts)",
            ])
            consumer.ack(delivery)
            if let jobID, let user = recorded.userID, let device = recorded.deviceID {
                announcer.send([JobEvent(
                    userID: user, deviceID: device, jobID: jobID, status: .dead, checkpoint: nil, hasRefusedOps: true,
                    spaceID: recorded.spaceID)])
            }
        } catch {
            await handBack(delivery, to: consumer, error: error, logger: logger)
        }
    }

    /// Hands a message back after a failure that is nobody's fault but the infrastructure's:
    /// waits until PostgreSQL answers (when it was the one failing), takes back the attempt
    /// it interrupted, and requeues. On shutdown it requeues at once.
    private func handBack(
        _ delivery: AMQPDelivery, to consumer: AMQPConsumer, error: any Error, releasingAttemptOf job: JobRef? = nil,
        logger: Logger
    ) async {
        let failure = JobFailure.classify(error)
        logger.warning("handing the message back", metadata: ["error": "\(error)", "reason": "\(failure.reason)"])
        if case .outage = failure {
            outageWaits.increment()
            if await waitForDatabase(), let job {
                try? await store.releaseAttempt(job, error: (error as? PGError)?.debugDescription ?? "\(error)")
            }
        } else {
            _ = await pause(seconds: configuration.retryDelays[0])
        }
        consumer.reject(delivery, requeue: true)
    }

    /// Polls PostgreSQL with a growing pause until it answers; false if the worker is
    /// shutting down first.
    private func waitForDatabase() async -> Bool {
        var backoff = Backoff(base: 0.25, cap: 5, jitter: false)
        while !(await database.ping()) {
            guard await pause(seconds: backoff.next()) else { return false }
        }
        return true
    }

    /// The jobs messages name, with their spaces: a message published before messages named
    /// the space has it looked up. Nil for a message naming no job, or a job not found.
    private func resolve(_ named: [(id: JobID, space: SpaceID?)?]) async throws -> [JobRef?] {
        let unplaced = named.compactMap { $0 }.filter { $0.space == nil }.map(\.id)
        let found = unplaced.isEmpty ? [:] : try await store.spaces(ofJobs: unplaced)
        return named.map { job in
            guard let job, let space = job.space ?? found[job.id] else { return nil }
            return JobRef(space: space, job: job.id)
        }
    }

    /// Sleeps, unless the worker is shutting down; false when it is.
    private func pause(seconds: Double) async -> Bool {
        guard seconds > 0 else { return !Task.isShuttingDownGracefully }
        do {
            try await cancelWhenGracefulShutdown { try await Task.sleep(for: .seconds(seconds)) }
            return true
        } catch {
            return false
        }
    }
}
