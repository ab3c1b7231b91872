import AMQPBridge
import BrokerTopology
import Logging
import Metrics
import NIOConcurrencyHelpers
import Persistence
import ServiceLifecycle
import ServiceSupport
import SyncModels

/// Publishes committed jobs that nobody confirmed publishing — the broker was down, the
/// publish failed, or a gateway died between commit and publish (an accepted push is never lost). Several gateways
/// may relay the same job; the worker's job-row check makes the duplicate harmless.
/// Also keeps the oldest-unfinished-job gauge current.
struct JobRelay: Service {
    let jobs: JobStore
    let marks: PublishedMarks
    let publisher: AMQPPublisher
    let relayAfter: Double
    let logger: Logger

    private let relayed = Counter(label: "syncline_relayed_jobs_total")
    private let oldestUnfinished = Gauge(label: "syncline_oldest_unfinished_job_age_seconds")

    init(jobs: JobStore, marks: PublishedMarks, publisher: AMQPPublisher, relayAfter: Double, logger: Logger) {
        self.jobs = jobs
        self.marks = marks
        self.publisher = publisher
        self.relayAfter = relayAfter
        self.logger = logger
    }

    func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            await relayOnce()
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .milliseconds(250)) }
        }
        try? await jobs.markPublished(marks.take())
    }

    func relayOnce() async {
        do {
            // Marks first, so that a job published in time is never relayed again.
            let published = marks.take()
            do {
                try await jobs.markPublished(published)
            } catch {
                marks.restore(published)
                throw error
            }
            oldestUnfinished.record(try await jobs.backlog().oldestAge)
            while true {
                let waiting = try await jobs.unpublished(olderThan: relayAfter, limit: 500)
                guard !waiting.isEmpty else { return }
                try await publisher.publish(waiting.map { SynclineTopology.jobMessage($0.job, traceID: $0.traceID, ops: $0.ops) })
                try await jobs.markPublished(waiting.map(\.job))
                relayed.increment(by: waiting.count)
                logger.info("relayed unpublished jobs", metadata: ["jobs.count": "\(waiting.count)"])
                if waiting.count < 500 { return }
            }
        } catch {
            logger.debug("relay pass failed; will retry", metadata: ["error": "\(error)"])
        }
    }
}

/// Jobs confirmed published by the push handler, recorded in the database in batches by
/// the relay rather than with one UPDATE per push.
final class PublishedMarks: Sendable {
    private let pending = NIOLockedValueBox<[JobRef]>([])

    func add(_ job: JobRef) { pending.withLockedValue { $0.append(job) } }

    func take() -> [JobRef] {
        pending.withLockedValue { ids in
            defer { ids = [] }
            return ids
        }
    }

    func restore(_ jobs: [JobRef]) { pending.withLockedValue { $0.append(contentsOf: jobs) } }
}
