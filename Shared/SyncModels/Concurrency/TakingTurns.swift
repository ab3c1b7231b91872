/// Work that many callers ask for and one of them runs at a time, for everyone waiting: no
/// task is started for it. A caller that arrives while nothing runs leads a run at once. One
/// that arrives during a run waits; when the run ends, the first of those waiting leads the
/// next run, which serves every request that waited for it. So a request is always served
/// by a run that starts after it was made, and a burst of requests costs one run more.
///
/// The state alone, with no locks and no awaiting: the owner keeps it under its lock, or
/// in its actor, and resumes the waiters it hands out. Used for the publisher's confirmed
/// batches, the clients' sync passes and observed queries' refreshes.
public struct TakingTurns<Waiter> {
    private var running = false
    private var waiting: [Waiter] = []

    public init() {}

    /// Whether a run is under way.
    public var isRunning: Bool { running }

    /// A caller arrives. True: nothing runs, so it leads a run now (and is not kept);
    /// false: it is kept, to be served by a later run or handed the lead by `finish()`.
    public mutating func arrive(_ waiter: Waiter) -> Bool {
        guard running else {
            running = true
            return true
        }
        waiting.append(waiter)
        return false
    }

    /// At the start of a run, the requests it serves besides its leader's: every one
    /// waiting now. A request made after this waits for the next run.
    public mutating func takeWaiting() -> [Waiter] {
        defer { waiting = [] }
        return waiting
    }

    /// The run ended. Returns who leads the next one (the first still waiting), or nil
    /// when nobody waits and the work stops until a caller arrives.
    public mutating func finish() -> Waiter? {
        guard !waiting.isEmpty else {
            running = false
            return nil
        }
        return waiting.removeFirst()
    }

    /// Requests a run took but could not serve (its leader was cancelled) wait again,
    /// ahead of those that arrived since.
    public mutating func putBack(_ waiters: [Waiter]) {
        waiting.insert(contentsOf: waiters, at: 0)
    }

    /// Drops every waiting request (the work is ending); returns them, to be answered.
    public mutating func cancelWaiting() -> [Waiter] { takeWaiting() }
}

extension TakingTurns: Sendable where Waiter: Sendable {}
