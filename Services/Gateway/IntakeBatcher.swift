import AMQPBridge
import BrokerTopology
import HTTPSupport
import Logging
import Metrics
import NIOConcurrencyHelpers
import Persistence
import PQBridge
import ServiceSupport
import SyncModels
import Tracing

/// Group commit at intake: a push that arrives while a slot is free is committed at once;
/// pushes that arrive while every slot is committing wait, and go together in the next
/// transaction (`JobStore.create(batch:)`), then their job messages in one confirmed
/// publish. Each push is answered once its own job committed (an accepted push is never
/// lost), before the publish (the relay publishes what a failed publish left). When the
/// batch's transaction fails, each of its pushes is taken alone, so one push cannot
/// fail the others.
final class IntakeBatcher: Sendable {
    private struct Waiting: Sendable {
        let intake: JobStore.Intake
        /// The push's trace.
        let context: ServiceContext
        let reply: CheckedContinuation<JobStore.IntakeOutcome, any Error>
    }

    private let dispatch: NIOLockedValueBox<BatchDispatch<Waiting>>
    private let jobs: JobStore
    private let publisher: AMQPPublisher
    private let marks: PublishedMarks
    private let logger: Logger
    /// Where the slots run.
    private let background: BackgroundWork
    private let batchSizes = Recorder(label: "syncline_intake_batch_size")
    private let fallbacks = Counter(label: "syncline_intake_batch_fallbacks_total")
    private let publishFailures = Counter(label: "syncline_publish_failures_total")

    init(
        jobs: JobStore, publisher: AMQPPublisher, marks: PublishedMarks, slots: Int, maxBatch: Int = 64,
        background: BackgroundWork, logger: Logger
    ) {
        self.background = background
        self.dispatch = NIOLockedValueBox(BatchDispatch(maxBatch: maxBatch, slots: slots))
        self.jobs = jobs
        self.publisher = publisher
        self.marks = marks
        self.logger = logger
    }

    /// Commits the push's job (with whatever pushes wait alongside it) and announces it.
    func submit(_ intake: JobStore.Intake) async throws -> JobStore.IntakeOutcome {
        try await withCheckedThrowingContinuation { reply in
            let waiting = Waiting(intake: intake, context: ServiceContext.current ?? .topLevel, reply: reply)
            let batches = dispatch.withLockedValue { $0.arrived(waiting) }
            for batch in batches where !background.submit({ await self.run(batch) }) { refuse(batch) }
        }
    }

    /// The gateway is stopping (which happens only once no request is left): the pushes,
    /// and any that waited behind them, are answered 503 and nothing is written.
    private func refuse(_ first: [Waiting]) {
        var batch = first
        while !batch.isEmpty {
            for waiting in batch { waiting.reply.resume(throwing: APIError.unavailable("The gateway is stopping; retry.")) }
            batch = dispatch.withLockedValue { $0.finished() }.first ?? []
        }
    }

    /// Commits batches in one slot until nothing waits.
    private func run(_ first: [Waiting]) async {
        var batch = first
        while !batch.isEmpty {
            await commit(batch)
            batch = dispatch.withLockedValue { $0.finished() }.first ?? []
        }
    }

    private func commit(_ batch: [Waiting]) async {
        await Traces.batch("intake commit", members: batch.map(\.context)) { contexts in
            await commitTraced(batch, contexts: contexts)
        }
    }

    /// `contexts`: each push's, within the batch's trace.
    private func commitTraced(_ batch: [Waiting], contexts: [ServiceContext]) async {
        batchSizes.record(batch.count)
        var outcomes: [Result<JobStore.IntakeOutcome, any Error>]
        if batch.count == 1 {
            outcomes = [await Result(catching: { try await self.jobs.create(batch[0].intake) })]
        } else {
            do {
                outcomes = try await jobs.create(batch: batch.map(\.intake)).map { .success($0) }
            } catch let error as PGError where error.code == .unconfirmed {
                // Committed, though no standby has it yet: committing the pushes again one by
                // one would make a second job of each push without an Idempotency-Key.
                outcomes = batch.map { _ in .failure(error) }
            } catch {
                fallbacks.increment()
                logger.info("intake batch rolled back; committing its pushes one by one", metadata: [
                    "pushes.count": "\(batch.count)", "error": "\(error)",
                ])
                outcomes = []
                for waiting in batch { outcomes.append(await Result(catching: { try await self.jobs.create(waiting.intake) })) }
            }
        }
        if let pause = Failpoints.pauseBeforePublish { try? await Task.sleep(for: .seconds(pause)) }
        // Committed is accepted: the answers go now, not after the broker's confirm (a third
        // of a push's time). The slot stays busy until the publish ends, so intake still
        // waits for a slow broker.
        for (waiting, outcome) in zip(batch, outcomes) { waiting.reply.resume(with: outcome) }
        await publish(zip(zip(batch, contexts), outcomes).compactMap { pair, outcome in
            guard case .success(.created(let job, _)) = outcome else { return nil }
            return (job, pair.1, pair.0.intake.ops.count)
        })
    }

    /// The jobs are committed: announce them. A failure here loses nothing — the relay
    /// publishes every job left unpublished — so the pushes are still accepted.
    private func publish(_ created: [(job: JobRef, context: ServiceContext, ops: Int)]) async {
        guard !created.isEmpty else { return }
        do {
            try await Traces.publish(
                created.map { (SynclineTopology.jobMessage($0.job, traceID: nil, ops: $0.ops), $0.context) }, with: publisher)
            created.forEach { marks.add($0.job) }
        } catch {
            publishFailures.increment(by: created.count)
            logger.warning("publish failed; the relay will retry", metadata: [
                "jobs": "\(created.map(\.job.job.description).joined(separator: ","))", "error": "\(error)",
            ])
        }
    }
}

extension Result where Failure == any Error {
    /// The outcome of an async throwing call, as a value.
    init(catching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}
