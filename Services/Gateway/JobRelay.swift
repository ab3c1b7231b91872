import AMQPBridge
import Logging
import Metrics
import Persistence
import ServiceLifecycle
import ServiceSupport

/// Publishes committed jobs that nobody confirmed publishing — the broker was down, the
/// publish failed, or a gateway died between commit and publish (G1). Several gateways
/// may relay the same job; the worker's job-row check makes the duplicate harmless.
/// Also keeps the oldest-unfinished-job gauge current.
struct JobRelay: Service {
    let jobs: JobStore
    let publisher: AMQPPublisher
    let relayAfter: Double
    let logger: Logger

    private let relayed = Counter(label: "syncline_relayed_jobs_total")
    private let oldestUnfinished = Gauge(label: "syncline_oldest_unfinished_job_age_seconds")

    init(jobs: JobStore, publisher: AMQPPublisher, relayAfter: Double, logger: Logger) {
        self.jobs = jobs
        self.publisher = publisher
        self.relayAfter = relayAfter
        self.logger = logger
    }

    func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            await relayOnce()
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .seconds(1)) }
        }
    }

    func relayOnce() async {
        do {
            oldestUnfinished.record(try await jobs.oldestUnfinishedAge())
            while true {
                let waiting = try await jobs.unpublished(olderThan: relayAfter, limit: 500)
                guard !waiting.isEmpty else { return }
                try await publisher.publish(waiting.map { SynclineTopology.jobMessage(jobID: $0.jobID, traceID: $0.traceID) })
                try await jobs.markPublished(waiting.map(\.jobID))
                relayed.increment(by: waiting.count)
                logger.info("relayed unpublished jobs", metadata: ["jobs.count": "\(waiting.count)"])
                if waiting.count < 500 { return }
            }
        } catch {
            logger.debug("relay pass failed; will retry", metadata: ["error": "\(error)"])
        }
    }
}
