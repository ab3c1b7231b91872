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
    case poke(cursor: String, space: String? = nil)
    /// The outcome of a job of the device's own: `troubled` when it had rejected or
    /// conflicting ops (the job's results say which), or died.
    case job(jobID: String, status: JobStatus, checkpoint: String?, troubled: Bool)
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
            if let space { fields["space_id"] = .string(space) }
            value = .object(fields)
        case .job(let jobID, let status, let checkpoint, let troubled):
            value = .object([
                "type": .string("job"), "job_id": .string(jobID), "status": .string(status.rawValue),
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
final class Hub: Service, Sendable {
    private struct Subscriber: Sendable {
        let deviceID: String
        /// The one space the stream is narrowed to; nil: every space of the user.
        let space: String?
        let continuation: AsyncStream<StreamMessage>.Continuation

        func covers(_ space: String?) -> Bool { self.space == nil || space == nil || self.space == space }
    }

    private struct Membership: Hashable, Sendable {
        let user: String
        let space: String
    }

    private struct State: Sendable {
        var users: [String: [UUID: Subscriber]] = [:]
        /// Memberships that ended in the last `endedMembershipSeconds`: a poke computed
        /// before the removal committed but arriving after its announcement is not delivered.
        var left: [Membership: Date] = [:]
        /// The bind of each connected user's routing key, made by their first stream; every
        /// later stream of the user waits for it too, so none says `hello` before its pokes
        /// can arrive. Forgotten when it fails (the next stream tries again) and when the
        /// user's last stream ends.
        var binds: [String: Task<Void, any Error>] = [:]
        var closed = false
    }

    /// How long an ended membership is remembered, in seconds.
    static let endedMembershipSeconds: Double = 10

    /// Why a stream was not admitted.
    private enum StreamRefusal: Error {
        case closed
        /// The user holds `streamsPerUser` streams here already.
        case tooMany
    }

    let queue: String
    private let state = NIOLockedValueBox(State())
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

    private let heartbeat: Double
    /// The most streams one user may hold open on this replica.
    let streamsPerUser: Int

    init(queue: String, publisher: AMQPPublisher, consumer: AMQPConsumer, registry: FanoutQueueStore, devices: DeviceStore,
         heartbeat: Double, streamsPerUser: Int, background: BackgroundWork, logger: Logger) {
        self.background = background
        self.streamsPerUser = streamsPerUser
        self.registry = registry
        self.devices = devices
        self.heartbeat = heartbeat
        self.queue = queue
        self.publisher = publisher
        self.consumer = consumer
        self.logger = logger
    }

    private func binding(_ user: String) -> AMQPTopology.Binding {
        .init(queue: queue, exchange: SynclineTopology.eventsExchange, routingKey: SynclineTopology.eventRoutingKey(user: user))
    }

    /// Whether the user holds fewer streams here than they may.
    func admits(user: String) -> Bool {
        state.withLockedValue { ($0.users[user]?.count ?? 0) < streamsPerUser }
    }

    /// Registers a stream; its messages come out of the returned sequence until
    /// `unsubscribe` (or shutdown) finishes it.
    func subscribe(user: String, deviceID: String, space: String?) async throws -> (UUID, AsyncStream<StreamMessage>) {
        let id = UUID()
        let (stream, continuation) = AsyncStream.makeStream(of: StreamMessage.self, bufferingPolicy: .bufferingNewest(64))
        let publisher = self.publisher, binding = binding(user)
        let streamsPerUser = self.streamsPerUser
        let admitted = state.withLockedValue { state -> Result<Task<Void, any Error>, StreamRefusal> in
            if state.closed { return .failure(.closed) }
            if state.users[user, default: [:]].count >= streamsPerUser { return .failure(.tooMany) }
            state.users[user, default: [:]][id] = Subscriber(deviceID: deviceID, space: space, continuation: continuation)
            // A stream of the space was authorized just now: the user is a member again.
            if let space { state.left[Membership(user: user, space: space)] = nil }
            if let existing = state.binds[user] { return .success(existing) }
            let task = Task { try await publisher.setBindings([binding], bound: true) }
            state.binds[user] = task
            return .success(task)
        }
        let bind: Task<Void, any Error>
        switch admitted {
        case .success(let task): bind = task
        case .failure(.closed):
            continuation.finish()
            throw CancellationError()
        case .failure(.tooMany):
            continuation.finish()
            throw tooManyStreams()
        }
        connected.increment()
        do {
            try await bind.value
        } catch {
            state.withLockedValue { state in
                if state.binds[user] == bind { state.binds[user] = nil }
            }
            unsubscribe(user: user, id: id)
            throw error
        }
        return (id, stream)
    }

    /// The refusal of a stream over `streamsPerUser`, counted.
    func tooManyStreams() -> APIError {
        refusedForCap.increment()
        return APIError.tooMany(
            "You have \(streamsPerUser) streams open here already; close one first.", limit: streamsPerUser, retryAfter: 5)
    }

    func unsubscribe(user: String, id: UUID) {
        let last = state.withLockedValue { state -> Bool in
            guard let subscriber = state.users[user]?.removeValue(forKey: id) else { return false }
            subscriber.continuation.finish()
            if state.users[user]?.isEmpty == true {
                state.users[user] = nil
                state.binds[user] = nil
                return true
            }
            return false
        }
        connected.decrement()
        if last {
            let binding = binding(user), publisher = self.publisher, logger = self.logger
            background.submit {
                do {
                    guard self.state.withLockedValue({ $0.users[user] == nil }) else { return }
                    try await publisher.setBindings([binding], bound: false)
                    // The user may have come back between the check and the unbind (their
                    // bind may even have run first): bind again, after the unbind.
                    if self.state.withLockedValue({ $0.users[user] != nil }) {
                        try await publisher.setBindings([binding], bound: true)
                    }
                } catch {
                    logger.debug("unbind failed; bindings are rebuilt periodically", metadata: ["error": "\(error)"])
                }
            }
        }
    }

    /// Routes one job event to this replica's streams of its user that cover its space: a
    /// poke to every other device; to the origin device, the job's outcome, so that it need
    /// not ask for it.
    @discardableResult
    func deliver(_ event: JobEvent) -> Int {
        var sent = 0
        let (subscribers, member) = state.withLockedValue { state in
            (state.users[event.userID].map { Array($0.values) } ?? [],
             event.spaceID.flatMap { state.left[Membership(user: event.userID, space: $0)] }
                .map { Date().timeIntervalSince($0) >= Self.endedMembershipSeconds } ?? true)
        }
        for subscriber in subscribers where subscriber.covers(event.spaceID) {
            if subscriber.deviceID == event.deviceID {
                let troubled = event.hasRefusedOps || event.status != .succeeded
                subscriber.continuation.yield(.job(jobID: event.jobID, status: event.status, checkpoint: event.checkpoint, troubled: troubled))
                delivered.increment()
                sent += 1
            } else if member, let cursor = event.checkpoint, event.status == .succeeded {
                subscriber.continuation.yield(.poke(cursor: cursor, space: event.spaceID))
                delivered.increment()
                sent += 1
            }
        }
        return sent
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
        let ended = state.withLockedValue { state -> [UUID] in
            (state.users[event.userID] ?? [:]).filter { event.deviceID == nil || $0.value.deviceID == event.deviceID }.map(\.key)
        }
        for id in ended { unsubscribe(user: event.userID, id: id) }
        if !ended.isEmpty {
            logger.info("closed streams of a revoked device", metadata: [
                "user.id": "\(event.userID)", "device.id": "\(event.deviceID ?? "*")", "streams": "\(ended.count)",
            ])
        }
    }

    /// Ends the user's streams narrowed to a space they are no longer a member of. Their
    /// streams of every space stay: the worker pokes only members, so that space's pokes
    /// stop there too.
    func leave(_ event: SpaceLeftEvent) {
        let ended = state.withLockedValue { state -> [UUID] in
            state.left[Membership(user: event.userID, space: event.spaceID)] = Date()
            return (state.users[event.userID] ?? [:]).filter { $0.value.space == event.spaceID }.map(\.key)
        }
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

    /// Heartbeats to idle streams, and the replica's bindings kept whole.
    private func maintain() async {
        var boundFor = 0
        var lastHeartbeat = Date()
        var lastRebind = Date()
        var lastRegistered = Date.distantPast
        var lastSeenMarked = Date()
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            // A device streaming for days is in use though it never pushes.
            if Date().timeIntervalSince(lastSeenMarked) >= 3600 {
                lastSeenMarked = Date()
                let connected = state.withLockedValue { Set($0.users.values.flatMap { $0.values.map(\.deviceID) }) }
                try? await devices.markSeen(deviceIDs: Array(connected))
            }
            if Date().timeIntervalSince(lastRegistered) >= 30 {
                do {
                    try await registry.refresh(queue: queue)
                    lastRegistered = Date()
                } catch {
                    logger.debug("cannot register this replica's queue yet", metadata: ["error": "\(error)"])
                }
            }
            if Date().timeIntervalSince(lastHeartbeat) >= heartbeat {
                lastHeartbeat = Date()
                state.withLockedValue { state in state.left = state.left.filter { Date().timeIntervalSince($0.value) < Self.endedMembershipSeconds } }
                let subscribers = state.withLockedValue { $0.users.values.flatMap(\.values) }
                subscribers.forEach { $0.continuation.yield(.heartbeat) }
            }
            let connections = consumer.connectionCount
            // After every (re)connect, and once a minute as a safety net.
            if consumer.isConnected, connections != boundFor || Date().timeIntervalSince(lastRebind) >= 60 {
                lastRebind = Date()
                let users = state.withLockedValue { Array($0.users.keys) }
                do {
                    try await publisher.setBindings(users.map(binding), bound: true)
                    if !users.isEmpty, connections != boundFor {
                        logger.info("rebound users after (re)connect", metadata: ["users": "\(users.count)"])
                    }
                    boundFor = connections
                } catch {
                    logger.warning("cannot bind yet", metadata: ["error": "\(error)"])
                }
            }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .milliseconds(200)) }
        }
    }

    private func closeAll() {
        let subscribers = state.withLockedValue { state -> [Subscriber] in
            state.closed = true
            defer { state.users = [:] }
            return state.users.values.flatMap(\.values)
        }
        subscribers.forEach { $0.continuation.finish() }
    }
}
