import AMQPBridge
import Foundation
import Logging
import Metrics
import PQBridge
import Persistence
import ServiceLifecycle
import ServiceSupport
import SyncModels

/// Takes job messages off `sync.jobs` and applies each job in PostgreSQL, acking only
/// after the applying transaction committed. The message only names the job: the user,
/// device and ops come from the job row.
struct JobConsumer: Service {
    let consumer: AMQPConsumer
    let store: ApplyStore
    let publisher: AMQPPublisher
    let configuration: Configuration
    let logger: Logger

    private let processed = Counter(label: "syncline_jobs_processed_total", dimensions: [("outcome", "succeeded")])
    private let duplicates = Counter(label: "syncline_jobs_processed_total", dimensions: [("outcome", "already_finished")])
    private let retried = Counter(label: "syncline_job_retries_total", dimensions: [("reason", "transient")])
    private let deadLettered = Counter(label: "syncline_dead_letters_total")
    private let pushToApplied = Timer(label: "syncline_push_to_applied_seconds")

    init(consumer: AMQPConsumer, store: ApplyStore, publisher: AMQPPublisher, configuration: Configuration, logger: Logger) {
        self.consumer = consumer
        self.store = store
        self.publisher = publisher
        self.configuration = configuration
        self.logger = logger
    }

    func run() async throws {
        consumer.start()
        await withGracefulShutdownHandler {
            await withTaskGroup(of: Void.self) { group in
                var inFlight = 0
                for await delivery in consumer.deliveries {
                    if inFlight >= configuration.workerPrefetch {
                        await group.next()
                        inFlight -= 1
                    }
                    group.addTask { await handle(delivery) }
                    inFlight += 1
                }
                // Stopped consuming: finish what is in flight, so each is acked or handed back.
                await group.waitForAll()
            }
        } onGracefulShutdown: {
            logger.info("stopping: no new jobs, finishing in-flight ones")
            consumer.stopConsuming()
        }
        await consumer.close()
        logger.info("job consumer stopped")
    }

    /// What happened to one delivery; each case settles the message exactly once.
    func handle(_ delivery: AMQPDelivery) async {
        guard let jobID = Self.jobID(in: delivery) else {
            await deadLetter(delivery, jobID: nil, reason: "invalid_message", error: "the message does not name a job")
            return
        }
        var logger = self.logger
        logger[metadataKey: "job.id"] = "\(jobID)"
        if let trace = delivery.header("traceparent") { logger[metadataKey: "trace.id"] = "\(trace)" }

        let attempt: Int
        do {
            guard let started = try await store.beginAttempt(jobID: jobID) else {
                // Unknown, or already terminal (a duplicate or late delivery).
                switch try await store.status(jobID: jobID) {
                case nil:
                    await deadLetter(delivery, jobID: jobID, reason: "unknown_job", error: "no job row with this id")
                case let status?:
                    logger.debug("job already finished; acking duplicate delivery", metadata: ["job.status": "\(status.rawValue)"])
                    duplicates.increment()
                    consumer.ack(delivery)
                }
                return
            }
            attempt = started
        } catch {
            // The database is unreachable: no attempt was spent. Hand the message back later.
            await retryLater(delivery, attempt: 1, error: error, logger: logger)
            return
        }

        do {
            switch try await store.apply(jobID: jobID) {
            case .succeeded(_, _, let checkpoint, _, let latency):
                consumer.ack(delivery)
                processed.increment()
                pushToApplied.recordSeconds(latency)
                logger.debug("job applied", metadata: ["job.checkpoint": "\(checkpoint)", "job.attempt": "\(attempt)"])
            case .alreadyFinished:
                duplicates.increment()
                consumer.ack(delivery)
            case .unknownJob:
                await deadLetter(delivery, jobID: jobID, reason: "unknown_job", error: "no job row with this id")
            }
        } catch let error as PGError where error.isRetryable {
            try? await store.failAttempt(jobID: jobID, error: error.debugDescription)
            if attempt >= configuration.maxAttempts {
                await deadLetter(delivery, jobID: jobID, reason: "max_attempts", error: error.debugDescription, attempts: attempt)
            } else {
                await retryLater(delivery, attempt: attempt, error: error, logger: logger)
            }
        } catch {
            // Not worth retrying: the job itself cannot be applied.
            try? await store.failAttempt(jobID: jobID, error: "\(error)")
            await deadLetter(delivery, jobID: jobID, reason: "permanent_error", error: "\(error)", attempts: attempt)
        }
    }

    static func jobID(in delivery: AMQPDelivery) -> String? {
        struct Body: Decodable { let job_id: String }
        guard let body = try? JSONDecoder().decode(Body.self, from: Data(delivery.body)) else { return nil }
        return Names.canonicalUUID(body.job_id)
    }

    /// Waits the retry delay for this attempt, then hands the message back to the queue.
    private func retryLater(_ delivery: AMQPDelivery, attempt: Int, error: any Error, logger: Logger) async {
        retried.increment()
        let delays = configuration.retryDelays
        let delay = delays[min(max(attempt - 1, 0), delays.count - 1)] * Double.random(in: 0.8...1.2)
        logger.warning("job failed transiently; retrying", metadata: [
            "error": "\(error)", "retry.in_ms": "\(Int(delay * 1000))",
        ])
        try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .seconds(delay)) }
        consumer.reject(delivery, requeue: true)
    }

    /// Parks the message in the dead-letter queue (confirmed) before acking it, so it is
    /// never lost; marks the job dead when there is one.
    private func deadLetter(_ delivery: AMQPDelivery, jobID: String?, reason: String, error: String, attempts: Int = 0) async {
        var headers: [String: AMQPTopology.Argument] = [
            "x-syncline-reason": .string(reason), "x-syncline-error": .string(error),
            "x-syncline-attempts": .int(Int64(attempts)),
        ]
        if let jobID { headers["x-syncline-job-id"] = .string(jobID) }
        let message = OutgoingMessage(
            exchange: SynclineTopology.deadLetterExchange, routingKey: SynclineTopology.deadLetterRoutingKey,
            body: delivery.body, messageID: delivery.messageID ?? jobID, headers: headers)
        do {
            try await publisher.publish([message])
            if let jobID { try await store.markDead(jobID: jobID, error: "\(reason): \(error)") }
            deadLettered.increment()
            logger.error("dead-lettered a message", metadata: ["job.id": "\(jobID ?? "-")", "reason": "\(reason)", "error": "\(error)"])
            consumer.ack(delivery)
        } catch {
            logger.warning("cannot dead-letter yet; handing the message back", metadata: ["error": "\(error)"])
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .seconds(configuration.retryDelays[0])) }
            consumer.reject(delivery, requeue: true)
        }
    }
}
