import Foundation
import Metrics
import NIOConcurrencyHelpers

/// Token buckets by key (a user, a client address) for one replica. Buckets that have
/// refilled are forgotten, so memory stays bounded by the keys active in the last
/// `burst / rate` seconds.
public final class RateLimiter: Sendable {
    private struct Bucket {
        var tokens: Double
        var at: Double
    }

    public let limit: RateLimit
    private let buckets = NIOLockedValueBox<[String: Bucket]>([:])
    private let clock: @Sendable () -> Double

    public init(_ limit: RateLimit, clock: @escaping @Sendable () -> Double = { ProcessInfo.processInfo.systemUptime }) {
        self.limit = limit
        self.clock = clock
    }

    /// Takes a token for `key`: nil when allowed, else the whole seconds to wait.
    public func acquire(_ key: String) -> Int? {
        guard !limit.isOff else { return nil }
        let now = clock()
        return buckets.withLockedValue { buckets in
            var bucket = buckets[key] ?? Bucket(tokens: limit.burst, at: now)
            bucket.tokens = min(limit.burst, bucket.tokens + (now - bucket.at) * limit.rate)
            bucket.at = now
            if buckets.count > 100_000 { buckets = buckets.filter { $0.value.tokens + (now - $0.value.at) * limit.rate < limit.burst } }
            guard bucket.tokens >= 1 else {
                buckets[key] = bucket
                return max(1, Int(((1 - bucket.tokens) / limit.rate).rounded(.up)))
            }
            bucket.tokens -= 1
            buckets[key] = bucket
            return nil
        }
    }
}

extension RateLimiter {
    /// Takes a token for `key` or throws 429 `rate_limited` with `Retry-After`, counted in
    /// `syncline_rate_limited_total{limit=…}`.
    public func check(_ key: String, limit name: String) throws(APIError) {
        if let wait = acquire(key) {
            Counter(label: "syncline_rate_limited_total", dimensions: [("limit", name)]).increment()
            throw APIError.rateLimited(retryAfter: wait)
        }
    }
}
