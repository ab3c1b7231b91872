import SyncModels

/// The decisions of a consumer's thread, apart from its I/O: when to connect and how long
/// to wait after a failed try, which settlements still apply (those of the live
/// connection; the broker redelivers the others), when to cancel, when to stop, and
/// what to do with a delivery after the cancel. The thread carries out each `Action` and
/// reports what happened; the decisions are tested without a broker.
///
/// Between failed connects the wait runs to a deadline: a wake-up (a settlement asked for
/// while the broker is away) neither shortens it nor counts as another failure, so the
/// backoff grows with real attempts only.
public struct ConsumerLoop: Sendable {
    public enum Phase: Sendable, Equatable {
        case consuming, draining, closing
    }

    public enum Settlement: Sendable, Equatable {
        case ack(UInt64, generation: Int)
        case reject(UInt64, generation: Int, requeue: Bool)

        var generation: Int {
            switch self {
            case .ack(_, let generation), .reject(_, let generation, _): generation
            }
        }
    }

    public enum Action: Sendable, Equatable {
        /// Open connection number `generation`, declare, consume; then report
        /// `connected()` or `connectFailed()`.
        case connect(generation: Int)
        /// Ack or reject these on the live connection.
        case settle([Settlement])
        /// Cancel the consumer (basic.cancel) and end the deliveries.
        case cancel
        /// Wait for input (or a wake-up) and take at most one delivery; then `received()`.
        case receive
        /// Not connected, and the next try is this many seconds away: wait (a wake-up
        /// ends the wait early; the next turn says what remains).
        case wait(seconds: Double)
        /// Close the connection and end.
        case stop
    }

    /// What to do with a delivery that arrived.
    public enum Delivery: Sendable, Equatable {
        case handOn
        /// The consumer was cancelled: give it back to the broker.
        case handBack
    }

    /// The number of the live (or last) connection; deliveries carry it.
    public private(set) var generation = 0
    private var isConnected = false
    private var cancelled = false
    private var backoff = Backoff(base: 0.25, cap: 10, jitter: false)
    /// When the next connect may be tried (seconds on the caller's monotonic clock).
    private var retryAt = -Double.infinity

    public init() {}

    /// One turn of the thread: what to do, in order, given the phase, the settlements
    /// asked for since the last turn, and the time (seconds on a monotonic clock).
    public mutating func turn(phase: Phase, settlements: [Settlement], now: Double) -> [Action] {
        guard isConnected else {
            guard phase == .consuming else { return [.stop] }
            if now < retryAt { return [.wait(seconds: retryAt - now)] }
            generation += 1
            return [.connect(generation: generation)]
        }
        var actions: [Action] = []
        let live = settlements.filter { $0.generation == generation }
        if !live.isEmpty { actions.append(.settle(live)) }
        if phase == .closing { return actions + [.stop] }
        if phase == .draining && !cancelled {
            cancelled = true
            actions.append(.cancel)
        }
        actions.append(.receive)
        return actions
    }

    public mutating func connected() {
        isConnected = true
        backoff.reset()
    }

    /// A connect failed at `now`; returns the seconds until the next try.
    @discardableResult
    public mutating func connectFailed(now: Double) -> Double {
        let wait = backoff.next()
        retryAt = now + wait
        return wait
    }

    public mutating func connectionLost() { isConnected = false }

    public func received() -> Delivery { cancelled ? .handBack : .handOn }
}
