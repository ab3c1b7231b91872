internal import CRabbitMQ
import Foundation
import Glibc
import SyncModels
import Logging
import NIOConcurrencyHelpers

/// Consumes one queue with manual acks and a prefetch, on a dedicated thread that owns
/// the connection. Deliveries come out of `deliveries`; `ack`/`reject` may be called
/// from any task and are carried out by the owning thread, which an eventfd wakes.
/// When the connection dies the thread reconnects with backoff; deliveries of the dead
/// connection can no longer be settled (the broker redelivers them), so their acks are
/// dropped by generation.
public final class AMQPConsumer: Sendable {
    public struct Configuration: Sendable {
        public var endpoint: AMQPEndpoint
        public var topology: AMQPTopology
        public var queue: String
        public var prefetch: UInt16
        public var heartbeatSeconds: Int
        public var consumerTag: String

        public init(
            endpoint: AMQPEndpoint, topology: AMQPTopology, queue: String, prefetch: UInt16,
            heartbeatSeconds: Int = 30, consumerTag: String = "syncline-\(UUID().uuidString.prefix(8))"
        ) {
            self.endpoint = endpoint
            self.topology = topology
            self.queue = queue
            self.prefetch = prefetch
            self.heartbeatSeconds = heartbeatSeconds
            self.consumerTag = consumerTag
        }
    }

    private typealias Settlement = ConsumerLoop.Settlement
    private typealias Phase = ConsumerLoop.Phase

    private struct Shared: Sendable {
        var settlements: [Settlement] = []
        var phase: Phase = .consuming
        var connected = false
        var connections = 0
    }

    public let deliveries: AsyncStream<AMQPDelivery>
    private let continuation: AsyncStream<AMQPDelivery>.Continuation
    private let shared = NIOLockedValueBox(Shared())
    private let wakeFD: Int32
    private let configuration: Configuration
    private let logger: Logger
    private struct Exit {
        var done = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }
    private let exit = NIOLockedValueBox(Exit())

    public init(configuration: Configuration, logger: Logger) {
        (deliveries, continuation) = AsyncStream.makeStream(of: AMQPDelivery.self)
        self.configuration = configuration
        self.logger = logger
        self.wakeFD = syncline_wake_fd()
    }

    deinit { Glibc.close(wakeFD) }

    /// Whether the consumer currently holds a live connection (for `/readyz`).
    public var isConnected: Bool { shared.withLockedValue { $0.connected } }

    /// How many times the consumer has (re)connected: a change means the broker may have
    /// lost state tied to the old connection (for example bindings of an expired queue).
    public var connectionCount: Int { shared.withLockedValue { $0.connections } }

    public func start() {
        let thread = Thread { [self] in
            self.runLoop()
            let waiters = self.exit.withLockedValue { exit in
                exit.done = true
                defer { exit.waiters = [] }
                return exit.waiters
            }
            waiters.forEach { $0.resume() }
        }
        thread.name = "amqp-consumer"
        thread.start()
    }

    public func ack(_ delivery: AMQPDelivery) {
        settle(.ack(delivery.deliveryTag, generation: delivery.generation))
    }

    /// Hands a message back (`requeue: true`) or lets the broker dead-letter or drop it.
    public func reject(_ delivery: AMQPDelivery, requeue: Bool) {
        settle(.reject(delivery.deliveryTag, generation: delivery.generation, requeue: requeue))
    }

    /// Stops taking new messages (basic.cancel) and ends `deliveries`; acks still work.
    public func stopConsuming() {
        shared.withLockedValue { if $0.phase == .consuming { $0.phase = .draining } }
        wake()
    }

    /// Settles what is pending, closes the connection (the broker requeues anything
    /// unacked) and waits for the thread to end.
    public func close() async {
        shared.withLockedValue { $0.phase = .closing }
        wake()
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            let done = exit.withLockedValue { exit in
                if !exit.done { exit.waiters.append(waiter) }
                return exit.done
            }
            if done { waiter.resume() }
        }
    }

    private func settle(_ settlement: Settlement) {
        shared.withLockedValue { $0.settlements.append(settlement) }
        wake()
    }

    private func wake() {
        var one: UInt64 = 1
        _ = Glibc.write(wakeFD, &one, 8)
    }

    private func drainWake() {
        var value: UInt64 = 0
        _ = Glibc.read(wakeFD, &value, 8)
    }

    // MARK: the owning thread

    /// Carries out what `ConsumerLoop` decides, turn after turn, until it says stop.
    private func runLoop() {
        var connection: AMQPConnection?
        var loop = ConsumerLoop()
        var nodes = BrokerNodes(configuration.endpoint, role: "consumer")
        defer {
            connection?.close()
            shared.withLockedValue { $0.connected = false }
            continuation.finish()
        }
        while true {
            let (phase, settlements) = shared.withLockedValue { state in
                defer { state.settlements = [] }
                return (state.phase, state.settlements)
            }
            let now = Double(DispatchTime.now().uptimeNanoseconds) / 1e9
            actions: for action in loop.turn(phase: phase, settlements: settlements, now: now) {
                switch action {
                case .stop:
                    return
                case .wait(let seconds):
                    waitForWake(seconds: seconds)
                case .connect(let generation):
                    connection = connect(generation: generation, nodes: &nodes, loop: &loop, now: now)
                case .settle, .cancel, .receive:
                    guard let live = connection else { break actions }
                    do {
                        try perform(action, on: live, loop: loop)
                    } catch {
                        logger.warning("AMQP consumer connection lost", metadata: ["error": "\(error)"])
                        live.abandon()
                        connection = nil
                        nodes.lost()
                        loop.connectionLost()
                        shared.withLockedValue { $0.connected = false }
                        break actions
                    }
                }
            }
        }
    }

    /// A connection to the first broker node that takes one, with the topology declared
    /// and the consumer started; nil (with `loop` told when to retry) when none does.
    private func connect(generation: Int, nodes: inout BrokerNodes, loop: inout ConsumerLoop, now: Double) -> AMQPConnection? {
        do {
            let fresh = try nodes.connect(heartbeatSeconds: configuration.heartbeatSeconds, logger: logger) { fresh throws(AMQPError) in
                try fresh.declare(configuration.topology)
                try fresh.consume(queue: configuration.queue, prefetch: configuration.prefetch, consumerTag: configuration.consumerTag)
            }
            loop.connected()
            shared.withLockedValue {
                $0.connected = true
                $0.connections += 1
            }
            logger.info("AMQP consumer connected", metadata: [
                "amqp.queue": "\(configuration.queue)", "amqp.connection": "\(generation)",
            ])
            return fresh
        } catch {
            let wait = loop.connectFailed(now: now)
            logger.warning("AMQP consumer cannot connect; retrying", metadata: [
                "error": "\(error)", "retry.in_ms": "\(Int(wait * 1000))",
            ])
            return nil
        }
    }

    /// One action on the live connection.
    private func perform(_ action: ConsumerLoop.Action, on live: AMQPConnection, loop: ConsumerLoop) throws(AMQPError) {
        switch action {
        case .settle(let settlements):
            for settlement in settlements {
                switch settlement {
                case .ack(let tag, _): try live.ack(tag)
                case .reject(let tag, _, let requeue): try live.reject(tag, requeue: requeue)
                }
            }
        case .cancel:
            try live.cancel(consumerTag: configuration.consumerTag)
            continuation.finish()
        case .receive:
            if !live.hasBufferedInput {
                // Wait for input or a wake-up; when idle, still call in below so that
                // rabbitmq-c sends and checks heartbeats.
                _ = waitForInput(socket: live.socketDescriptor, seconds: 1)
            }
            switch try live.nextDelivery(timeout: 0, generation: loop.generation) {
            case .delivery(let delivery):
                switch loop.received() {
                case .handOn: continuation.yield(delivery)
                case .handBack: try live.reject(delivery.deliveryTag, requeue: true)
                }
            case .nothing:
                break
            }
        case .connect, .wait, .stop:
            break
        }
    }

    /// Waits until the socket is readable or someone wakes the thread.
    private func waitForInput(socket: Int32, seconds: TimeInterval) -> Bool {
        var fds = [
            pollfd(fd: socket, events: Int16(POLLIN), revents: 0),
            pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0),
        ]
        let ready = poll(&fds, 2, Int32(seconds * 1000))
        if fds[1].revents != 0 { drainWake() }
        return ready > 0 && fds[0].revents != 0
    }

    private func waitForWake(seconds: TimeInterval) {
        var fds = [pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)]
        _ = poll(&fds, 1, Int32((seconds * 1000).rounded(.up)))
        if fds[0].revents != 0 { drainWake() }
    }
}

extension AMQPConsumer {
    /// Hands deliveries to `handler` in batches, as `BatchDispatch` decides: up to `slots`
    /// batches at once, each of at most `maxBatch` deliveries and `maxWeight` in the sum of
    /// their `weight`s. Returns once the deliveries have ended and every batch has finished.
    public func handleInBatches(
        maxBatch: Int, maxWeight: Int = .max, slots: Int,
        weight: @escaping @Sendable (AMQPDelivery) -> Int = { _ in 1 },
        _ handler: @escaping @Sendable ([AMQPDelivery]) async -> Void
    ) async {
        enum Event: Sendable { case arrived(AMQPDelivery), finished, ended }
        let (events, sink) = AsyncStream.makeStream(of: Event.self)
        let deliveries = self.deliveries
        await withDiscardingTaskGroup { group in
            group.addTask {
                for await delivery in deliveries { sink.yield(.arrived(delivery)) }
                sink.yield(.ended)
            }
            var dispatch = BatchDispatch<AMQPDelivery>(maxBatch: maxBatch, maxWeight: maxWeight, slots: slots)
            for await event in events {
                let batches: [[AMQPDelivery]]
                switch event {
                case .arrived(let delivery): batches = dispatch.arrived(delivery, weight: weight(delivery))
                case .finished: batches = dispatch.finished()
                case .ended:
                    dispatch.end()
                    batches = []
                }
                for batch in batches {
                    group.addTask {
                        await handler(batch)
                        sink.yield(.finished)
                    }
                }
                if dispatch.isDone { break }
            }
            sink.finish()
        }
    }

    /// Runs `handler` for each delivery, at most `limit` at once, until the consumer stops
    /// consuming; then waits for the handlers in flight, so each settles its delivery.
    public func handleConcurrently(limit: Int, _ handler: @escaping @Sendable (AMQPDelivery) async -> Void) async {
        await withTaskGroup(of: Void.self) { group in
            var inFlight = 0
            for await delivery in deliveries {
                if inFlight >= limit {
                    await group.next()
                    inFlight -= 1
                }
                group.addTask { await handler(delivery) }
                inFlight += 1
            }
            await group.waitForAll()
        }
    }
}
