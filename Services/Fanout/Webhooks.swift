import AMQPBridge
import AsyncHTTPClient
import Auth
import BrokerTopology
import Foundation
import HTTPSupport
import Logging
import Metrics
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Persistence
import ServiceLifecycle
import ServiceSupport
import SyncModels
import Tracing

/// Signed webhooks. Two steps over shared durable queues, so any fanout replica
/// can do either:
/// 1. `notify.events` (every job event): one delivery message per other device of the user
///    with a `push_url`, published to `notify.deliveries`;
/// 2. `notify.deliveries`: one POST each, concurrently (a slow or dead receiver holds only
///    its own delivery, for at most `WEBHOOK_TIMEOUT`, its answer's body included). A
///    failure waits in the retry queue of its tier; after `MAX_ATTEMPTS` it is a dead
///    letter (`queue=notify`) parked in `notify.dead-letters`. The attempt count travels in
///    the message's own header.
///
/// One user's receivers, or one receiving host (and port), hold at most `WEBHOOKS_PER_USER` and
/// `WEBHOOKS_PER_HOST` deliveries at once: a delivery beyond them waits in the first retry
/// queue, not counted as an attempt, instead of holding one of the places every user's
/// deliveries share. A slow receiver thus costs its own owner only.
struct WebhookDispatcher: Service {
    let events: AMQPConsumer
    let deliveries: AMQPConsumer
    let devices: DeviceStore
    let deadLetters: DeadLetterStore
    let publisher: AMQPPublisher
    let configuration: Configuration
    let logger: Logger
    let limits: WebhookLimits
    let directory = WebhookDirectory(ttl: 5)
    private let perUser: ConcurrencyLimiter
    private let perHost: ConcurrencyLimiter

    /// Deliveries handled at once by one fanout, every user's together.
    static let concurrentDeliveries = 64

    init(
        events: AMQPConsumer, deliveries: AMQPConsumer, devices: DeviceStore, deadLetters: DeadLetterStore,
        publisher: AMQPPublisher, configuration: Configuration, limits: WebhookLimits, logger: Logger
    ) {
        self.limits = limits
        perUser = ConcurrencyLimiter(limit: limits.perUser)
        perHost = ConcurrencyLimiter(limit: limits.perHost)
        self.events = events
        self.deliveries = deliveries
        self.devices = devices
        self.deadLetters = deadLetters
        self.publisher = publisher
        self.configuration = configuration
        self.logger = logger
    }

    /// The client deliveries are posted with. A receiver's 3xx is a failed delivery, never
    /// followed: a redirect could bounce the delivery to a private address after that
    /// address check.
    static func makeClient(_ limits: WebhookLimits) -> HTTPClient {
        let timeout = TimeAmount.milliseconds(Int64(limits.timeout * 1000))
        var configuration = HTTPClient.Configuration(
            redirectConfiguration: .disallow, timeout: .init(connect: timeout, read: timeout))
        configuration.connectionPool = .init(
            idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: limits.perHost)
        return HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    }

    func run() async throws {
        // Counted from zero, so that alerts see the series before the first one.
        for reason in DeadLetterReason.ofWebhooks {
            Counter(label: "syncline_webhook_dead_letters_total", dimensions: [("reason", reason.rawValue)]).increment(by: 0)
        }
        let client = Self.makeClient(limits)
        events.start()
        deliveries.start()
        await withGracefulShutdownHandler {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await events.handleConcurrently(limit: 32) { await expand($0) } }
                group.addTask { await deliveries.handleConcurrently(limit: Self.concurrentDeliveries) { await deliver($0, with: client) } }
            }
        } onGracefulShutdown: {
            events.stopConsuming()
            deliveries.stopConsuming()
        }
        await events.close()
        await deliveries.close()
        try? await client.shutdown()
    }

    /// One job event → one delivery per other device of the user that has a webhook.
    func expand(_ message: AMQPDelivery) async {
        await Traces.batch(
            "process \(SynclineTopology.notifyEventsQueue)", members: [Traces.context(of: message)], kind: .consumer
        ) { _ in await expandTraced(message) }
    }

    private func expandTraced(_ message: AMQPDelivery) async {
        guard let event = try? JSONCoding.decode(JobEvent.self, from: Data(message.body)),
              event.status == .succeeded, let cursor = event.checkpoint
        else {
            events.ack(message)  // nothing to poke about
            return
        }
        do {
            let hooks = try await directory.webhooks(user: event.userID, devices: devices)
                .filter { $0.deviceID != event.deviceID }
            let messages = hooks.map { hook in
                SynclineTopology.webhookDeliveryMessage(
                    body: Array((try? JSONCoding.encode(WebhookDelivery(
                        userID: event.userID, deviceID: hook.deviceID, cursor: cursor, jobID: event.jobID,
                        spaceID: event.spaceID))) ?? Data()),
                    attempt: 0)
            }
            let context = ServiceContext.current ?? .topLevel
            try await Traces.publish(messages.map { ($0, context) }, with: publisher)
            events.ack(message)
        } catch {
            logger.warning("cannot expand a job event yet", metadata: ["error": "\(error)"])
            try? await Task.sleep(for: .seconds(configuration.retryDelays[0]))
            events.reject(message, requeue: true)
        }
    }

    /// One POST; then ack, retry by tier, or dead-letter.
    func deliver(_ message: AMQPDelivery, with client: HTTPClient) async {
        await Traces.batch("deliver webhook", members: [Traces.context(of: message)], kind: .client) { _ in
            await deliverTraced(message, with: client)
        }
    }

    private func deliverTraced(_ message: AMQPDelivery, with client: HTTPClient) async {
        guard let delivery = try? JSONCoding.decode(WebhookDelivery.self, from: Data(message.body)) else {
            await park(message, delivery: nil, reason: .invalidMessage, error: "not a webhook delivery", attempts: 0)
            return
        }
        let attempt = (message.header(SynclineTopology.Header.attempt).flatMap(Int.init) ?? 0) + 1
        do {
            guard let hook = try await devices.webhook(user: delivery.userID, device: delivery.deviceID) else {
                deliveries.ack(message)  // revoked, deleted, or no push_url any more
                return
            }
            if !configuration.allowPrivateWebhooks, let host = URL(string: hook.url)?.host,
               await WebhookAddresses.resolvesToPrivateOffThePool(host: host) {
                await park(message, delivery: delivery, reason: .privateAddress,
                           error: "\(host) is a private or loopback address (ALLOW_PRIVATE_WEBHOOKS is off)", attempts: attempt)
                return
            }
            // Both places, or neither: a slot not kept is given back as it goes.
            guard let ownerSlot = perUser.acquire(delivery.userID.text), let hostSlot = perHost.acquire(Self.receiver(of: hook.url)) else {
                Counter(label: "syncline_webhooks_total", dimensions: [("outcome", "postponed")]).increment()
                // Its attempts unchanged: it was not tried.
                _ = await retry(message, attempts: attempt - 1, in: SynclineTopology.notifyRetryQueue(delay: configuration.retryDelays[0]))
                return
            }
            defer { ownerSlot.release(); hostSlot.release() }
            let status = try await withDeadline(seconds: limits.timeout) { [self] in try await post(delivery, to: hook, with: client) }
            if (200..<300).contains(status) {
                Counter(label: "syncline_webhooks_total", dimensions: [("outcome", "delivered")]).increment()
                deliveries.ack(message)
                return
            }
            await failed(message, delivery: delivery, attempt: attempt, error: "HTTP \(status)")
        } catch {
            await failed(message, delivery: delivery, attempt: attempt, error: "\(error)")
        }
    }

    private func post(_ delivery: WebhookDelivery, to hook: DeviceStore.Webhook, with client: HTTPClient) async throws -> Int {
        let request = HTTPClientRequest.signedPost(to: hook.url, body: delivery.pokeBody, secret: hook.secret)
        let response = try await client.execute(request, timeout: .milliseconds(Int64(limits.timeout * 1000)))
        // The receiver's answer is not read, only drained (up to 64 KiB) so that its connection is kept.
        _ = try? await response.body.collect(upTo: 1 << 16)
        return Int(response.status.code)
    }

    /// The receiving host of a push URL, with its port: what its deliveries' places are
    /// counted by (and what the HTTP client pools connections by).
    static func receiver(of url: String) -> String {
        guard let components = URLComponents(string: url), let host = components.host?.lowercased() else { return url }
        return "\(host):\(components.port ?? (components.scheme?.lowercased() == "https" ? 443 : 80))"
    }

    private func failed(_ message: AMQPDelivery, delivery: WebhookDelivery, attempt: Int, error: String) async {
        Counter(label: "syncline_webhooks_total", dimensions: [("outcome", "failed")]).increment()
        if attempt >= configuration.maxAttempts {
            await park(message, delivery: delivery, reason: .maxAttempts, error: error, attempts: attempt)
            return
        }
        let queue = SynclineTopology.notifyRetryQueue(
            delay: SynclineTopology.retryDelay(afterAttempt: attempt, delays: configuration.retryDelays))
        if await retry(message, attempts: attempt, in: queue) {
            logger.info("webhook failed; retrying", metadata: ["device.id": "\(delivery.deviceID)", "error": "\(error)", "retry.queue": "\(queue)"])
        }
    }

    /// Publishes the delivery to a retry queue with `attempts` made, then acks it; true
    /// when published. When the broker refuses, the delivery goes back to its queue after
    /// the first retry delay.
    private func retry(_ message: AMQPDelivery, attempts: Int, in queue: String) async -> Bool {
        do {
            try await publisher.publish([SynclineTopology.webhookDeliveryMessage(body: message.body, attempt: attempts, retryQueue: queue)])
            deliveries.ack(message)
            return true
        } catch {
            try? await Task.sleep(for: .seconds(configuration.retryDelays[0]))
            deliveries.reject(message, requeue: true)
            return false
        }
    }

    /// Records the dead letter (`queue=notify`), parks the message in `notify.dead-letters`, acks.
    private func park(_ message: AMQPDelivery, delivery: WebhookDelivery?, reason: DeadLetterReason, error: String, attempts: Int) async {
        let id = SynclineTopology.deadLetterID(jobID: nil, body: message.body)
        do {
            _ = try await deadLetters.record(
                id: id, queue: "notify", namedJobID: nil, reason: reason.rawValue, error: error,
                message: String(decoding: message.body, as: UTF8.self), userID: delivery?.userID,
                deviceID: delivery?.deviceID, attempts: attempts)
            var parked = SynclineTopology.deadLetterMessage(
                id: id, jobID: nil, body: message.body, reason: reason.rawValue, error: error, attempts: attempts, traceID: nil)
            parked.routingKey = SynclineTopology.notifyDeadLetterRoutingKey
            try await publisher.publish([parked])
            Counter(label: "syncline_webhook_dead_letters_total", dimensions: [("reason", reason.rawValue)]).increment()
            logger.error("webhook dead-lettered", metadata: ["device.id": "\(delivery.map(\.deviceID.description) ?? "-")", "reason": "\(reason.rawValue)", "error": "\(error)"])
            deliveries.ack(message)
        } catch {
            try? await Task.sleep(for: .seconds(configuration.retryDelays[0]))
            deliveries.reject(message, requeue: true)
        }
    }

}

/// Which devices of a user have webhooks, remembered for a few seconds: every job event
/// needs the answer, and most users have none, so asking PostgreSQL each time cost a
/// fifth of the applied throughput in the benchmark. A device registered with a push_url
/// gets pokes within `ttl`; one revoked meanwhile is still skipped at delivery.
final class WebhookDirectory: Sendable {
    private let entries = NIOLockedValueBox<[UserID: (at: Date, hooks: [DeviceStore.Webhook])]>([:])
    private let ttl: Double

    init(ttl: Double) { self.ttl = ttl }

    func webhooks(user: UserID, devices: DeviceStore) async throws -> [DeviceStore.Webhook] {
        let now = Date()
        if let entry = entries.withLockedValue({ $0[user] }), now.timeIntervalSince(entry.at) < ttl { return entry.hooks }
        let hooks = try await devices.webhooks(user: user)
        entries.withLockedValue { entries in
            if entries.count > 50_000 { entries.removeAll(keepingCapacity: true) }
            entries[user] = (now, hooks)
        }
        return hooks
    }
}

/// What webhook deliveries may take: their deadline, and their places per owner and per
/// receiving host (`WEBHOOK_TIMEOUT`, `WEBHOOKS_PER_USER`, `WEBHOOKS_PER_HOST`).
struct WebhookLimits: Sendable, Equatable {
    var timeout: Double
    var perUser: Int
    var perHost: Int
}
