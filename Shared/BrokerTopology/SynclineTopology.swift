import AMQPBridge
import Auth
import Crypto
import Foundation
import SyncModels

/// Broker names and the topology every service declares at start-up.
///
///     sync.jobs (exchange) ──► sync.jobs (quorum queue) ──► workers
///        ▲                         │ delivery-limit exceeded (the broker's own backstop)
///        │ TTL expired             ▼
///     sync.retry.<delay> ◄─┐    sync.dlx ──► sync.jobs.exhausted ──► workers mark the job dead
///     (one queue per tier) │       │
///              workers ────┘       └───────► sync.jobs.dead-letters ◄── workers, after MAX_ATTEMPTS
///
/// Every queue the broker dead-letters from names an exchange that exists and routes, and
/// quorum queues dead-letter at-least-once, so the broker never drops a job by itself.
public enum SynclineTopology {
    public static let jobsExchange = "sync.jobs"
    /// Topic exchange: one event per finished job, routing key `user.<sha256 of user id>`.
    public static let eventsExchange = "sync.events"
    public static let jobsQueue = "sync.jobs"
    public static let jobsRoutingKey = "sync.jobs"
    public static let deadLetterExchange = "sync.dlx"
    /// Parked messages, one per dead letter an operator has not acted on. A quorum queue,
    /// so that it lives on every node of a cluster and no single node's death stops the
    /// services from declaring their topology. Admin tools read it with basic.get and hand
    /// back what they keep; each return counts as a delivery, hence a delivery limit no
    /// sweep reaches (RabbitMQ 4 would otherwise drop a message after 20).
    public static let deadLetterQueue = "sync.jobs.dead-letters"
    public static let deadLetterRoutingKey = "sync.jobs.dlq"
    /// The delivery limit of the dead-letter queues.
    public static let parkedDeliveryLimit: Int64 = 1_000_000_000
    /// Where the broker puts a job message it redelivered `deliveryLimit` times (workers
    /// crashing on it): workers consume it and dead-letter the job properly.
    public static let exhaustedQueue = "sync.jobs.exhausted"
    public static let exhaustedRoutingKey = "sync.jobs.exhausted"
    /// The broker's own backstop against a message redelivered forever; well above
    /// MAX_ATTEMPTS so it only ever catches what the worker could not.
    public static let deliveryLimit: Int64 = 50

    // Webhooks: events fan out into one delivery per device; failed deliveries wait in
    // their tier's `notify.retry.<delay>` and, after MAX_ATTEMPTS, park in `notify.dead-letters`.
    public static let notifyEventsQueue = "notify.events"
    public static let notifyExchange = "notify"
    public static let notifyDeliveriesQueue = "notify.deliveries"
    public static let notifyDeliveriesRoutingKey = "notify.deliveries"
    public static let notifyDeadLetterQueue = "notify.dead-letters"
    public static let notifyDeadLetterRoutingKey = "notify.dlq"

    /// Classic dead-letter queues of earlier releases, each with the queue that replaces it:
    /// what they still hold is moved there (`DeadLetterOffice.moveRetiredQueues`).
    public static let retiredDeadLetterQueues = [("sync.jobs.dlq", deadLetterQueue), ("notify.dlq", notifyDeadLetterQueue)]

    public static func notifyRetryQueue(delay: Double) -> String { "notify.retry.\(Durations.label(delay))" }

    /// The retry queue for one tier: `sync.retry.5s`.
    public static func retryQueue(delay: Double) -> String { "sync.retry.\(Durations.label(delay))" }

    /// How long attempt `attempt + 1` waits (attempt n+1 waits the n-th delay,
    /// the last one repeating) — for jobs and webhook deliveries alike.
    public static func retryDelay(afterAttempt attempt: Int, delays: [Double]) -> Double {
        delays[min(max(attempt - 1, 0), delays.count - 1)]
    }

    /// The retry queue that holds a job before its attempt `attempt + 1`.
    public static func retryQueue(afterAttempt attempt: Int, delays: [Double]) -> (name: String, delay: Double) {
        let delay = retryDelay(afterAttempt: attempt, delays: delays)
        return (retryQueue(delay: delay), delay)
    }

    /// Every queue of the job pipeline, in the order an operator reads them.
    public static func queueNames(retryDelays: [Double]) -> [String] {
        [jobsQueue] + uniqueDelays(retryDelays).map(retryQueue(delay:)) + [exhaustedQueue, deadLetterQueue]
            + [notifyEventsQueue, notifyDeliveriesQueue] + uniqueDelays(retryDelays).map(notifyRetryQueue(delay:))
            + [notifyDeadLetterQueue]
    }

    public static func topology(retryDelays: [Double]) -> AMQPTopology {
        let atLeastOnce: [String: AMQPTopology.Argument] = [
            "x-queue-type": .string("quorum"),
            "x-dead-letter-strategy": .string("at-least-once"),
            "x-overflow": .string("reject-publish"),
        ]
        let parked: [String: AMQPTopology.Argument] = [
            "x-queue-type": .string("quorum"), "x-delivery-limit": .int(parkedDeliveryLimit),
        ]
        let retryQueues = uniqueDelays(retryDelays).map { delay in
            AMQPTopology.Queue(name: retryQueue(delay: delay), arguments: atLeastOnce.merging([
                "x-message-ttl": .int(Int64((delay * 1000).rounded())),
                "x-dead-letter-exchange": .string(jobsExchange),
                "x-dead-letter-routing-key": .string(jobsRoutingKey),
            ]) { $1 })
        }
        let notifyRetryQueues = uniqueDelays(retryDelays).map { delay in
            AMQPTopology.Queue(name: notifyRetryQueue(delay: delay), arguments: atLeastOnce.merging([
                "x-message-ttl": .int(Int64((delay * 1000).rounded())),
                "x-dead-letter-exchange": .string(notifyExchange),
                "x-dead-letter-routing-key": .string(notifyDeliveriesRoutingKey),
            ]) { $1 })
        }
        return AMQPTopology(
            exchanges: [
                .init(name: jobsExchange), .init(name: deadLetterExchange), .init(name: eventsExchange, type: "topic"),
                .init(name: notifyExchange),
            ],
            queues: [
                .init(name: jobsQueue, arguments: atLeastOnce.merging([
                    "x-delivery-limit": .int(deliveryLimit),
                    "x-dead-letter-exchange": .string(deadLetterExchange),
                    "x-dead-letter-routing-key": .string(exhaustedRoutingKey),
                ]) { $1 }),
                .init(name: exhaustedQueue, arguments: ["x-queue-type": .string("quorum")]),
                .init(name: deadLetterQueue, arguments: parked),
                // Pokes are hints: with no fanout running for a long time, the oldest go.
                .init(name: notifyEventsQueue, arguments: [
                    "x-queue-type": .string("quorum"), "x-max-length": .int(100_000), "x-overflow": .string("drop-head"),
                ]),
                .init(name: notifyDeliveriesQueue, arguments: ["x-queue-type": .string("quorum")]),
                .init(name: notifyDeadLetterQueue, arguments: parked),
            ] + retryQueues + notifyRetryQueues,
            bindings: [
                .init(queue: jobsQueue, exchange: jobsExchange, routingKey: jobsRoutingKey),
                .init(queue: exhaustedQueue, exchange: deadLetterExchange, routingKey: exhaustedRoutingKey),
                .init(queue: deadLetterQueue, exchange: deadLetterExchange, routingKey: deadLetterRoutingKey),
                .init(queue: notifyEventsQueue, exchange: eventsExchange, routingKey: "#"),
                .init(queue: notifyDeliveriesQueue, exchange: notifyExchange, routingKey: notifyDeliveriesRoutingKey),
                .init(queue: notifyDeadLetterQueue, exchange: deadLetterExchange, routingKey: notifyDeadLetterRoutingKey),
            ])
    }

    private static func uniqueDelays(_ delays: [Double]) -> [Double] {
        var seen = Set<String>()
        return delays.filter { seen.insert(Durations.label($0)).inserted }
    }

    /// The message that announces a committed job: its id and space, nothing else the
    /// worker trusts. `ops` (when known) lets a worker bound its batches in ops without
    /// reading the job first.
    public static func jobMessage(_ job: JobRef, traceID: String?, ops: Int? = nil) -> OutgoingMessage {
        var headers: [String: AMQPTopology.Argument] = [:]
        if let traceID { headers["traceparent"] = .string(traceID) }
        if let ops { headers[Header.ops] = .int(Int64(ops)) }
        return OutgoingMessage(
            exchange: jobsExchange, routingKey: jobsRoutingKey,
            body: Array(#"{"job_id":"\#(job.job)","space_id":"\#(job.space)"}"#.utf8), messageID: job.job.description,
            headers: headers)
    }

    /// The id a dead letter is listed under: its job's id, or — for a message that names
    /// no job — a UUID derived from the body, so a redelivered copy is the same dead letter.
    public static func deadLetterID(jobID: JobID?, body: [UInt8]) -> String {
        if let jobID { return jobID.description }
        var bytes = Array(SHA256.hash(data: body).prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x50  // version 5 style (name-based)
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        return bytes.withUnsafeBytes { UUID(uuid: $0.load(as: uuid_t.self)) }.uuidString.lowercased()
    }

    /// The message parked in `sync.jobs.dead-letters`: the body as received, and headers saying why.
    public static func deadLetterMessage(
        id: String, jobID: JobID?, body: [UInt8], reason: String, error: String, attempts: Int, traceID: String?
    ) -> OutgoingMessage {
        var headers: [String: AMQPTopology.Argument] = [
            Header.deadLetterID: .string(id), Header.reason: .string(reason),
            Header.error: .string(String(error.prefix(1000))), Header.attempts: .int(Int64(attempts)),
        ]
        if let jobID { headers[Header.jobID] = .string(jobID.description) }
        if let traceID { headers[Header.trace] = .string(traceID) }
        return OutgoingMessage(
            exchange: deadLetterExchange, routingKey: deadLetterRoutingKey, body: body, messageID: id, headers: headers)
    }

    /// A webhook delivery (body: `WebhookDelivery`) after `attempt` failed attempts: to
    /// `notify.deliveries` now, or with `retryQueue`, to wait there first.
    public static func webhookDeliveryMessage(body: [UInt8], attempt: Int, retryQueue: String? = nil) -> OutgoingMessage {
        OutgoingMessage(
            exchange: retryQueue == nil ? notifyExchange : "", routingKey: retryQueue ?? notifyDeliveriesRoutingKey,
            body: body, headers: [Header.attempt: .int(Int64(attempt))])
    }

    /// A job message sent to wait in a retry queue before attempt `attempt + 1`.
    public static func retryMessage(queue: String, job: JobRef, attempt: Int, traceID: String?, ops: Int) -> OutgoingMessage {
        var message = jobMessage(job, traceID: traceID, ops: ops)
        message.exchange = ""  // the default exchange routes by queue name
        message.routingKey = queue
        message.headers[Header.attempt] = .int(Int64(attempt))
        return message
    }

    /// The op count a job message carries; 1 when it carries none.
    public static func opCount(inMessage delivery: AMQPDelivery) -> Int {
        delivery.header(Header.ops).flatMap { Int($0) } ?? 1
    }

    /// The job id a job message names, or nil when it is not a job message.
    public static func jobID(inMessage body: [UInt8]) -> JobID? {
        job(inMessage: body)?.id
    }

    /// The job a job message names, with its space; the space is nil in a message
    /// published before messages named it (the job's row then tells it).
    public static func job(inMessage body: [UInt8]) -> (id: JobID, space: SpaceID?)? {
        guard let fields = (try? JSONParser.parse(body))?.objectValue,
              let id = fields["job_id"]?.stringValue.flatMap(JobID.init) else { return nil }
        return (id, fields["space_id"]?.stringValue.flatMap(SpaceID.init))
    }

    /// The dead letter a parked message stands for.
    public static func deadLetterID(of message: AMQPDelivery) -> String {
        message.header(Header.deadLetterID) ?? deadLetterID(jobID: jobID(inMessage: message.body), body: message.body)
    }

    /// The routing key of a user's events: the user id hashed, so any id fits a topic key.
    public static func eventRoutingKey(user: UserID) -> String {
        "user." + Digests.sha256Hex(Array(user.text.utf8))
    }

    /// The event a worker publishes after a job finished (committed or dead-lettered). Not
    /// mandatory: with no fanout listening for the user it is simply dropped.
    public static func eventMessage(_ event: JobEvent) -> OutgoingMessage {
        userEventMessage(user: event.userID, event, messageID: event.jobID.description)
    }

    /// A revocation, routed like the user's job events so every replica with a stream of
    /// that user hears it.
    public static func revocationMessage(_ event: DeviceRevokedEvent) -> OutgoingMessage {
        userEventMessage(user: event.userID, event, messageID: nil)
    }

    /// The end of a membership, routed like the user's job events.
    public static func spaceLeftMessage(_ event: SpaceLeftEvent) -> OutgoingMessage {
        userEventMessage(user: event.userID, event, messageID: nil)
    }

    private static func userEventMessage(user: UserID, _ event: some Encodable, messageID: String?) -> OutgoingMessage {
        OutgoingMessage(
            exchange: eventsExchange, routingKey: eventRoutingKey(user: user),
            body: Array((try? JSONCoding.encode(event)) ?? Data()), messageID: messageID, mandatory: false)
    }

    /// Header names Syncline sets on the messages it moves between queues.
    public enum Header {
        public static let attempt = "x-syncline-attempt"
        public static let deadLetterID = "x-syncline-dead-letter-id"
        public static let reason = "x-syncline-reason"
        public static let error = "x-syncline-error"
        public static let attempts = "x-syncline-attempts"
        public static let jobID = "x-syncline-job-id"
        /// A job message's op count.
        public static let ops = "x-syncline-ops"
        public static let trace = "traceparent"
    }
}
