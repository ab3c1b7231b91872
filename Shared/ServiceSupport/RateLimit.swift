import Foundation
import Metrics
import NIOConcurrencyHelpers

/// A token-bucket limit: `rate` tokens a second, up to `burst` saved. Written as
/// `20/s,burst=40` or `600/m` (burst defaults to one second's worth, at least 1); `off`
/// disables the limit.
public struct RateLimit: Sendable, Equatable {
    public var rate: Double
    public var burst: Double

    public static let off = RateLimit(rate: .infinity, burst: .infinity)
    public var isOff: Bool { rate.isInfinite }

    public init(rate: Double, burst: Double) {
        self.rate = rate
        self.burst = burst
    }

    public init?(_ text: String) {
        let parts = text.lowercased().split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        if parts == ["off"] {
            self = .off
            return
        }
        guard let first = parts.first else { return nil }
        let rateParts = first.split(separator: "/")
        guard rateParts.count == 2, let count = Double(rateParts[0]), count > 0, count.isFinite else { return nil }
        let seconds: Double
        switch rateParts[1] {
        case "s": seconds = 1
        case "m": seconds = 60
        case "h": seconds = 3600
        default: return nil
        }
        rate = count / seconds
        burst = max(1, rate)
        for option in parts.dropFirst() {
            let pair = option.split(separator: "=")
            guard pair.count == 2, pair[0] == "burst", let value = Double(pair[1]), value >= 1, value.isFinite else { return nil }
            burst = value
        }
    }
}

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
