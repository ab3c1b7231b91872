/// What a pool of connections decides, as a value: which checkout gets a connection, who
/// waits and until when, whose wait ends and why, what a returned connection does, when
/// the timer that ends waits runs. `PGPool` keeps it under a lock and carries out what it
/// answers (resuming callers, closing connections, starting the timer) outside the lock.
///
/// `Connection` and `Waiter` are whatever the pool hands out and keeps for a caller (a
/// continuation); the value never looks inside them, so it is tested with plain values.
struct PGPoolState<Connection, Waiter> {
    typealias Instant = ContinuousClock.Instant

    /// Connections not in use, each with when it came back (the last one back is taken
    /// first; health checks take those idle longest).
    private var idle: [(connection: Connection, since: Instant)]
    /// Callers waiting for a connection, in arrival order, which is deadline order (one
    /// timeout for all): the first one's deadline is the earliest.
    private var waiting: [(id: UInt64, waiter: Waiter, deadline: Instant)] = []
    /// Checkouts whose task was cancelled before they started waiting.
    private var cancelledBeforeWaiting: Set<UInt64> = []
    private var nextID: UInt64 = 1
    private(set) var isClosed = false
    /// Whether the timer that ends waits at their deadline runs: one per pool while anyone
    /// waits, not one per wait (a cancelled `Task.sleep` keeps its memory until its
    /// deadline, so a busy pool's waits would pile up ten seconds of timers).
    private var timerRuns = false

    init(connections: [Connection], now: Instant) {
        idle = connections.map { ($0, now) }
    }

    // MARK: Checkouts

    /// What a checkout comes to at once.
    enum Checkout {
        /// This connection, now (`idle`: how many are left idle).
        case connection(Connection, id: UInt64, idle: Int)
        /// None is idle: the caller waits (`wait`) under this id.
        case wait(id: UInt64)
        case closed
    }

    /// A caller asks for a connection.
    mutating func checkOut() -> Checkout {
        guard !isClosed else { return .closed }
        defer { nextID += 1 }
        guard let (connection, _) = idle.popLast() else { return .wait(id: nextID) }
        return .connection(connection, id: nextID, idle: idle.count)
    }

    /// What a wait comes to.
    enum Wait {
        /// A connection came back meanwhile: no wait.
        case connection(Connection)
        case closed
        /// Cancelled before it began to wait.
        case cancelled
        /// It waits; `startTimer`: the timer is not running, the caller starts it.
        case waits(startTimer: Bool)
    }

    /// Checkout `id`, given none at once, begins to wait until `deadline`.
    mutating func wait(_ id: UInt64, _ waiter: Waiter, until deadline: Instant) -> Wait {
        if isClosed { return .closed }
        if cancelledBeforeWaiting.remove(id) != nil { return .cancelled }
        if let (connection, _) = idle.popLast() { return .connection(connection) }
        // Deadlines made just before the lock may come in a different order: none ends
        // before the one ahead of it (which is later by microseconds at most).
        waiting.append((id, waiter, max(deadline, waiting.last?.deadline ?? deadline)))
        defer { timerRuns = true }
        return .waits(startTimer: !timerRuns)
    }

    /// Checkout `id` is cancelled: its waiter, to be told, if it waits; else it is
    /// remembered, and refused when it begins to wait.
    mutating func cancel(_ id: UInt64) -> Waiter? {
        guard let index = waiting.firstIndex(where: { $0.id == id }) else {
            cancelledBeforeWaiting.insert(id)
            return nil
        }
        return waiting.remove(at: index).waiter
    }

    /// Checkout `id` ended (with a connection or without): a cancel that came after it has
    /// nothing left to refuse.
    mutating func ended(_ id: UInt64) {
        cancelledBeforeWaiting.remove(id)
    }

    // MARK: Returns

    /// What a connection back from a caller does.
    enum CheckIn {
        /// Goes to this waiter.
        case handTo(Waiter)
        /// Stays idle (`idle` connections now idle).
        case idle(Int)
        /// The pool is closed: close it.
        case close
    }

    /// A connection comes back at `now`.
    mutating func checkIn(_ connection: Connection, now: Instant) -> CheckIn {
        if isClosed { return .close }
        if !waiting.isEmpty { return .handTo(waiting.removeFirst().waiter) }
        idle.append((connection, now))
        return .idle(idle.count)
    }

    // MARK: The timer

    /// The timer wakes at `now`: the waiters whose deadline has come (to be told
    /// `.timeout`), and when to wake next — nil: nobody waits, and the timer stops.
    mutating func expire(now: Instant) -> (expired: [Waiter], next: Instant?) {
        let count = waiting.prefix { $0.deadline <= now }.count
        let expired = waiting.prefix(count).map(\.waiter)
        waiting.removeFirst(count)
        guard let first = waiting.first else {
            timerRuns = false
            return (expired, nil)
        }
        return (expired, first.deadline)
    }

    // MARK: Health checks and closing

    /// An idle connection that has been idle since `before` or earlier, taken for a check
    /// (it comes back through `checkIn`); nil when there is none.
    mutating func takeIdle(since before: Instant) -> Connection? {
        guard let index = idle.firstIndex(where: { $0.since <= before }) else { return nil }
        return idle.remove(at: index).connection
    }

    /// Closes the pool: the waiters to tell `.closed` and the idle connections to close.
    mutating func close() -> (waiters: [Waiter], idle: [Connection]) {
        isClosed = true
        defer {
            waiting = []
            idle = []
        }
        return (waiting.map(\.waiter), idle.map(\.connection))
    }
}

extension PGPoolState: Sendable where Connection: Sendable, Waiter: Sendable {}

// Compared in tests, with plain values for connections and waiters.
extension PGPoolState.Wait: Equatable where Connection: Equatable {}
extension PGPoolState.CheckIn: Equatable where Waiter: Equatable {}
