/// Exponential backoff with full jitter: the n-th retry waits a random time up to
/// `base · 2ⁿ` (at most `cap`), never less than a server's `Retry-After`.
struct Backoff: Sendable {
    var base = 0.25
    var cap = 30.0
    private(set) var failures = 0

    init(base: Double = 0.25, cap: Double = 30) {
        self.base = base
        self.cap = cap
    }

    /// The wait before the next try, in seconds; `random` in 0..<1.
    mutating func next(retryAfter: Double? = nil, random: Double = Double.random(in: 0..<1)) -> Double {
        let ceiling = min(cap, base * Double(1 << min(failures, 20)))
        failures += 1
        return max(retryAfter ?? 0, ceiling * random)
    }

    mutating func reset() { failures = 0 }
}
