/// How long to wait before trying again, for everything that retries: the client's sync
/// loop, stream and job polls, and the services' broker reconnects. The n-th wait after a
/// failure is `base · 2ⁿ`, at most `cap` — with full jitter (a random time up to that)
/// where many parties might retry in step, and never less than a server's `Retry-After`.
public struct Backoff: Sendable {
    public let base: Double
    public let cap: Double
    /// Full jitter; without it, the waits are exactly `base · 2ⁿ`.
    public let jitter: Bool
    public private(set) var failures = 0

    public init(base: Double = 0.25, cap: Double = 30, jitter: Bool = true) {
        self.base = base
        self.cap = cap
        self.jitter = jitter
    }

    /// The wait before the next try, in seconds; `random` in 0..<1.
    public mutating func next(retryAfter: Double? = nil, random: Double = Double.random(in: 0..<1)) -> Double {
        let ceiling = min(cap, base * Double(1 << min(failures, 20)))
        failures += 1
        return max(retryAfter ?? 0, jitter ? ceiling * random : ceiling)
    }

    public mutating func reset() { failures = 0 }
}
