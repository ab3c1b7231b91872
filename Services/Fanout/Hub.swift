import AMQPBridge
import BrokerTopology
import Foundation
import HTTPSupport
import Logging
import Metrics
import NIOConcurrencyHelpers
import Persistence
import ServiceLifecycle
import ServiceSupport
import SyncModels
import Tracing

/// What a stream sends, one JSON object per message.
enum StreamMessage: Sendable, Equatable {
    case hello(PullStore.StreamStart)
    /// `space`: the space that changed.
    case poke(cursor: String, space: SpaceID? = nil)
    /// The outcome of a job of the device's own: `troubled` when it had rejected or
    /// conflicting ops (the job's results say which), or died.
    case job(jobID: JobID, status: JobStatus, checkpoint: String?, troubled: Bool)
    case heartbeat

    var json: String {
        let value: JSONValue
        switch self {
        case .hello(let start):
            value = .object([
                "type": .string("hello"), "cursor": .string(start.cursor), "space_id": .string(start.space),
                "spaces": .object(start.spaces.mapValues(JSONValue.string)),
            ])
        case .poke(let cursor, let space):
            var fields: [String: JSONValue] = ["type": .string("poke"), "cursor": .string(cursor)]
            if let space { fields["space_id"] = .string(space.description) }
            value = .object(fields)
        case .job(let jobID, let status, let checkpoint, let troubled):
            value = .object([
                "type": .string("job"), "job_id": .string(jobID.description), "status": .string(status.rawValue),
                "checkpoint": checkpoint.map(JSONValue.string) ?? .null, "troubled": .bool(troubled),
            ])
        case .heartbeat: value = .object(["type": .string("heartbeat")])
        }
        return JSONWriter.string(value)
    }
}

/// The connected streams of this fanout replica, by user, and this replica's own queue on
/// `sync.events`: bound to a user's routing key while at least one of the user's devices
/// is connected here, so every replica receives exactly the events of its users.
///
/// What it knows is a `HubState`, under a lock; the hub carries out what each change of
/// that state returns — sends, finishes, binds — outside the lock.
final class Hub: Service, Sendable {
    let queue: String
    private let state: NIOLockedValueBox<HubState>
    private let publisher: AMQPPublisher
    private let consumer: AMQPConsumer
    private let registry: FanoutQueueStore
    private let devices: DeviceStore
    private let logger: Logger
    /// Where an unbind runs after a user's last stream ended.
    private let background: BackgroundWork
    private let connected = Meter(label: "syncline_stream_connections")
    private let delivered = Counter(label: "syncline_stream_messages_total")

    private let refusedForCap = Counter(label: "syncline_rate_limited_total", dimensions: [("limit", "streams_per_user")])

    /// The most streams one user may hold open on this replica.
    let streamsPerUser: Int

    init(queue: String, publisher: AMQPPublisher, consumer: AMQPConsumer, registry: FanoutQueueStore, devices: DeviceStore,
         heartbeat: Double, streamsPerUser: Int, background: BackgroundWork, logger: Logger) {
        self.state = NIOLockedValueBox(HubState(
            streamsPerUser: streamsPerUser, intervals: .init(heartbeat: heartbeat), now: Self.now()))
        self.background = background
        self.streamsPerUser = streamsPerUser
        self.registry = registry
        self.devices = devices
        self.queue = queue
        self.publisher = publisher
        self.consumer = consumer
        self.logger = logger
    }

    /// Seconds on a monotonic clock: the hub's timers do not follow the wall clock.
    static func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    private func binding(_ user: UserID) -> AMQPTopology.Binding {
        .init(queue: queue, exchange: SynclineTopology.eventsExchange, routingKey: SynclineTopology.eventRoutingKey(user: user))
    }

    /// Whether the user holds fewer streams here than they may.
    func admits(user: UserID) -> Bool {
        state.withLockedValue { $0.admits(user: user) }
    }

    /// Registers a stream; its messages go to `sink` until `unsubscribe` (or shutdown)
    /// finishes it. Returns once the user's routing key is bound, so the stream's `hello`
    /// is never ahead of its pokes.
    /// `expires`: the token's `exp` (Unix seconds), when the stream is ended.
    func subscribe(user: UserID, deviceID: DeviceID, space: SpaceID?, expires: Int64, sink: any StreamSink) async throws -> UUID {
        let id = UUID()
        let left = Double(expires) - Date().timeIntervalSince1970
        let subscriber = HubState.Subscriber(id: id, deviceID: deviceID, space: space, sink: sink, expiresAt: Self.now() + left)
        let admission: HubState.Admission
        do {
            admission = try await withCheckedThrowingContinuation { waiter in
                let decided = state.withLockedValue { $0.subscribe(user: user, subscriber, waiter: waiter) }
                if decided.admitted { connected.increment() }
                decided.settle(waiter)
            }
        } catch let refusal as HubState.Refusal {
            throw refusal == .closed ? CancellationError() : tooManyStreams()
        } catch {
            unsubscribe(user: user, id: id)  // the bind it waited for failed
            throw error
        }
        if admission == .bind {
            do {
                try await publisher.setBindings([binding(user)], bound: true)
            } catch {
                bindFinished(user: user, failure: error)
                unsubscribe(user: user, id: id)
                throw error
            }
            bindFinished(user: user, failure: nil)
        }
        return id
    }

    private func bindFinished(user: UserID, failure: (any Error)?) {
        let waiters = state.withLockedValue { $0.bindFinished(user: user, succeeded: failure == nil) }
        for waiter in waiters {
            if let failure { waiter.resume(throwing: failure) } else { waiter.resume(returning: .ready) }
        }
    }

    /// The refusal of a stream over `streamsPerUser`, counted.
    func tooManyStreams() -> APIError {
        refusedForCap.increment()
        return APIError.tooMany(
            "You have \(streamsPerUser) streams open here already; close one first.", limit: streamsPerUser, retryAfter: 5)
    }

    /// Ends a stream; after the user's last, unbinds their routing key in the background.
    func unsubscribe(user: UserID, id: UUID) {
        guard let (ended, wasLast) = state.withLockedValue({ $0.unsubscribe(user: user, id: id) }) else { return }
        ended.sink.finish()
        connected.decrement()
        guard wasLast else { return }
        let binding = binding(user), publisher = self.publisher, logger = self.logger, state = self.state
        background.submit {
            do {
                guard !state.withLockedValue({ $0.isConnected(user: user) }) else { return }
                try await publisher.setBindings([binding], bound: false)
                // The user may have come back between the check and the unbind (their
                // bind may even have run first): bind again, after the unbind.
                if state.withLockedValue({ $0.isConnected(user: user) }) {
                    try await publisher.setBindings([binding], bound: true)
                }
            } catch {
                logger.debug("unbind failed; bindings are rebuilt periodically", metadata: ["error": "\(error)"])
            }
        }
    }

    /// Sends one job event to this replica's streams of its user that cover its space
    /// (`HubState.deliveries`). Returns how many messages went out.
    @discardableResult
    func deliver(_ event: JobEvent) -> Int {
        let deliveries = state.withLockedValue { $0.deliveries(of: event, now: Self.now()) }
        for delivery in deliveries {
            delivery.subscriber.sink.send(delivery.message)
            delivered.increment()
        }
        return deliveries.count
    }

    /// `deliver`, in a span of the job's trace (when tracing is on and the trace sampled).
    private func deliverTraced(_ event: JobEvent, from delivery: AMQPDelivery) {
        let context = Traces.context(of: delivery)
        guard let tracer = Traces.tracer, Traces.isSampled(context) else {
            deliver(event)
            return
        }
        tracer.withSpan("poke \(queue)", context: context, ofKind: .consumer) { span in
            span.attributes["messaging.system"] = "rabbitmq"
            span.attributes["messaging.operation.type"] = "process"
            span.attributes["messaging.destination.name"] = queue
            span.attributes["syncline.streams.sent"] = deliver(event)
        }
    }

    /// Ends the streams of a revoked device (every device of the user when `deviceID` is
    /// nil): a lost phone stops listening the moment it is revoked.
    func revoke(_ event: DeviceRevokedEvent) {
        let ended = state.withLockedValue { $0.streams(of: event.userID, device: event.deviceID) }
        for id in ended { unsubscribe(user: event.userID, id: id) }
        if !ended.isEmpty {
            logger.info("closed streams of a revoked device", metadata: [
                "user.id": "\(event.userID)", "device.id": "\(event.deviceID.map(\.description) ?? "*")", "streams": "\(ended.count)",
            ])
        }
    }

    /// Ends the user's streams narrowed to a space they are no longer a member of
    /// (`HubState.left`).
    func leave(_ event: SpaceLeftEvent) {
        let ended = state.withLockedValue { $0.left(user: event.userID, space: event.spaceID, now: Self.now()) }
        for id in ended { unsubscribe(user: event.userID, id: id) }
    }

    /// What arrives on this replica's queue, told apart by its `type` (a job event has none).
    private enum Incoming: Decodable {
        case job(JobEvent)
        case revoked(DeviceRevokedEvent)
        case left(SpaceLeftEvent)

        private enum Keys: String, CodingKey { case type }

        init(from decoder: any Decoder) throws {
            switch try decoder.container(keyedBy: Keys.self).decodeIfPresent(String.self, forKey: .type) {
            case nil: self = .job(try JobEvent(from: decoder))
            case "device_revoked": self = .revoked(try DeviceRevokedEvent(from: decoder))
            case "space_left": self = .left(try SpaceLeftEvent(from: decoder))
            case let other?:
                throw DecodingError.dataCorrupted(.init(codingPath: [Keys.type], debugDescription: "unknown event type \(other)"))
            }
        }
    }

    /// Consumes this replica's queue; after every (re)connect binds the keys of every
    /// connected user again (an expired queue loses its bindings) and sends heartbeats. On
    /// shutdown, ends every stream so their responses finish.
    func run() async throws {
        consumer.start()
        await withGracefulShutdownHandler {
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    for await delivery in self.consumer.deliveries {
                        self.consumer.ack(delivery)
                        switch try? JSONCoding.decode(Incoming.self, from: Data(delivery.body)) {
                        case .job(let event)?: self.deliverTraced(event, from: delivery)
                        case .revoked(let event)?: self.revoke(event)
                        case .left(let event)?: self.leave(event)
                        case nil: self.logger.warning("ignored an event this fanout cannot read")
                        }
                    }
                }
                group.addTask { await self.maintain() }
            }
        } onGracefulShutdown: {
            self.consumer.stopConsuming()
            self.closeAll()
        }
        await consumer.close()
        try? await registry.remove(queue: queue)
    }

    /// Heartbeats to idle streams, the replica's queue registered, its bindings kept whole,
    /// and streaming devices marked as seen: what `HubState.tick` says is due, every 200 ms.
    private func maintain() async {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            let connection = consumer.connectionCount, isConnected = consumer.isConnected
            let duties = state.withLockedValue {
                $0.tick(now: Self.now(), consumerConnection: connection, consumerConnected: isConnected)
            }
            await perform(duties)
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .milliseconds(200)) }
        }
    }

    private func perform(_ duties: HubState.Duties) async {
        if let seen = duties.markSeen { try? await devices.markSeen(devices: seen) }
        if duties.register {
            do {
                try await registry.refresh(queue: queue, streams: duties.streams.map {
                    FanoutQueueStore.Stream(deviceID: $0.deviceID, spaceID: $0.space, openedAt: $0.openedAt)
                })
                state.withLockedValue { $0.registered(now: Self.now()) }
            } catch {
                logger.debug("cannot register this replica's queue yet", metadata: ["error": "\(error)"])
            }
        }
        duties.heartbeats.forEach { $0.sink.send(.heartbeat) }
        for (user, id) in duties.expired { unsubscribe(user: user, id: id) }
        if let rebind = duties.rebind {
            do {
                try await publisher.setBindings(rebind.users.map(binding), bound: true)
                if !rebind.users.isEmpty, rebind.afterReconnect {
                    logger.info("rebound users after (re)connect", metadata: ["users": "\(rebind.users.count)"])
                }
                state.withLockedValue { $0.rebound(connection: rebind.connection) }
            } catch {
                logger.warning("cannot bind yet", metadata: ["error": "\(error)"])
            }
        }
    }

    private func closeAll() {
        state.withLockedValue { $0.close() }.forEach { $0.sink.finish() }
    }
}
