import AMQPBridge
import BrokerTopology
import Logging
import Metrics
import NIOConcurrencyHelpers
import ServiceLifecycle
import ServiceSupport
import SyncModels
import Tracing

/// Tells fanout which jobs finished, after their commits, without holding a job slot
/// while the broker confirms: `send` queues the events and returns; one loop publishes
/// whatever is queued as one confirmed batch. Events are hints — a device that misses a
/// poke gets the change at its next pull — so when the broker is slower than the jobs,
/// the oldest events beyond `capacity` are dropped, and counted.
final class EventAnnouncer: Service, Sendable {
    /// Each event with the trace of the job it tells of.
    private let queued = NIOLockedValueBox<[(event: JobEvent, context: ServiceContext)]>([])
    private let signals: AsyncStream<Void>
    private let signal: AsyncStream<Void>.Continuation
    private let publisher: AMQPPublisher
    private let capacity: Int
    private let logger: Logger
    private let dropped = Counter(label: "syncline_job_events_dropped_total")
    static let chunk = 1_000

    init(publisher: AMQPPublisher, capacity: Int = 100_000, logger: Logger) {
        (signals, signal) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        self.publisher = publisher
        self.capacity = capacity
        self.logger = logger
    }

    /// Queues events of the job being handled now (its trace is the current one).
    func send(_ events: [JobEvent]) {
        let context = ServiceContext.current ?? .topLevel
        send(events.map { ($0, context) })
    }

    func send(_ events: [(event: JobEvent, context: ServiceContext)]) {
        guard !events.isEmpty else { return }
        let over = queued.withLockedValue { queued -> Int in
            queued += events
            let over = max(0, queued.count - capacity)
            queued.removeFirst(over)
            return over
        }
        if over > 0 { dropped.increment(by: over) }
        signal.yield(())
    }

    /// Publishes until shutdown, then what is still queued (the job consumer, stopped
    /// before this, sends nothing more).
    func run() async throws {
        await withGracefulShutdownHandler {
            for await _ in signals { await publishQueued() }
        } onGracefulShutdown: {
            self.signal.finish()
        }
        await publishQueued()
    }

    private func publishQueued() async {
        let events = queued.withLockedValue { queued in
            defer { queued = [] }
            return queued
        }
        for start in stride(from: 0, to: events.count, by: Self.chunk) {
            let chunk = events[start..<min(start + Self.chunk, events.count)]
            do {
                try await Traces.publish(chunk.map { (SynclineTopology.eventMessage($0.event), $0.context) }, with: publisher)
            } catch {
                logger.debug("job events not published", metadata: ["events.count": "\(chunk.count)", "error": "\(error)"])
            }
        }
    }
}
