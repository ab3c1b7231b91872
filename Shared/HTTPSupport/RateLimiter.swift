import Foundation
import Metrics
import NIOConcurrencyHelpers
import ServiceSupport

/// Token buckets by key (a user, a client address) for one replica. Buckets that have
/// refilled are forgotten once more than `maxKeys` are held, at most once a second, so
/// memory stays bounded and a flood of new keys cannot make every request scan them all.
public final class RateLimiter: Sendable {
    private struct Bucket {
        var tokens: Double
        var at: Double
    }

    private struct State {
        var buckets: [String: Bucket] = [:]
        var nextSweep: Double = 0
    }

    public let limit: RateLimit
    private let state = NIOLockedValueBox(State())
    private let clock: @Sendable () -> Double
    static let maxKeys = 100_000

    public init(_ limit: RateLimit, clock: @escaping @Sendable () -> Double = { ProcessInfo.processInfo.systemUptime }) {
        self.limit = limit
        self.clock = clock
    }

    /// Takes `cost` tokens for `key` (at most a full bucket's worth, so any request can
    /// pass once the bucket has refilled): nil when allowed, else the whole seconds to wait.
    public func acquire(_ key: String, cost requested: Double = 1) -> Int? {
        guard !limit.isOff else { return nil }
        let limit = self.limit, cost = min(requested, limit.burst)
        return withBucket(key) { bucket in
            guard bucket.tokens >= cost else { return max(1, Int(((cost - bucket.tokens) / limit.rate).rounded(.up))) }
            bucket.tokens -= cost
            return nil
        }
    }

    /// Takes as many of `wanted` whole tokens for `key` as it holds, and returns how many
    /// it took: for requests whose items are each allowed or refused on their own.
    public func take(_ key: String, upTo wanted: Int) -> Int {
        guard !limit.isOff else { return wanted }
        return withBucket(key) { bucket in
            let taken = min(wanted, Int(bucket.tokens.rounded(.down)))
            bucket.tokens -= Double(taken)
            return taken
        }
    }

    /// Runs `body` on `key`'s bucket, refilled to now, under the lock.
    private func withBucket<T>(_ key: String, _ body: (inout Bucket) -> T) -> T {
        let now = clock(), limit = self.limit
        return state.withLockedValue { state in
            if state.buckets.count > Self.maxKeys, now >= state.nextSweep {
                state.nextSweep = now + 1
                state.buckets = state.buckets.filter { $0.value.tokens + (now - $0.value.at) * limit.rate < limit.burst }
            }
            var bucket = state.buckets[key] ?? Bucket(tokens: limit.burst, at: now)
            // Concurrent callers may reach the lock in another order than they read the
            // clock: time never runs backwards for a bucket.
            bucket.tokens = min(limit.burst, bucket.tokens + max(0, now - bucket.at) * limit.rate)
            bucket.at = max(bucket.at, now)
            defer { state.buckets[key] = bucket }
            return body(&bucket)
        }
    }
}

extension RateLimiter {
    /// Takes a token for `key` or throws 429 `rate_limited` with `Retry-After`, counted in
    /// `syncline_rate_limited_total{limit=…}`.
    public func check(_ key: String, limit name: String, cost: Int = 1) throws(APIError) {
        if let wait = acquire(key, cost: Double(cost)) {
            Counter(label: "syncline_rate_limited_total", dimensions: [("limit", name)]).increment()
            throw APIError.rateLimited(retryAfter: wait, limit: Int64(limit.burst))
        }
    }
}
