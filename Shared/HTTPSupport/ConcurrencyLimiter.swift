import Metrics
import NIOConcurrencyHelpers

/// At most `limit` of one kind of work at once per key (a user's downloads, a client
/// address's): a slot is taken before the work and given back by `release()`, or when the
/// slot is dropped, however the work ends (finished, failed, or its response abandoned
/// before its body was written).
public final class ConcurrencyLimiter: Sendable {
    public let limit: Int
    private let counts = NIOLockedValueBox([String: Int]())

    public init(limit: Int) { self.limit = limit }

    public final class Slot: Sendable {
        private let owner: ConcurrencyLimiter
        private let key: String
        private let released = NIOLockedValueBox(false)

        fileprivate init(owner: ConcurrencyLimiter, key: String) {
            self.owner = owner
            self.key = key
        }

        public func release() {
            let first = released.withLockedValue { released in
                defer { released = true }
                return !released
            }
            if first { owner.giveBack(key) }
        }

        deinit { release() }
    }

    /// A slot for `key`, or nil when it holds `limit` already.
    public func acquire(_ key: String) -> Slot? {
        let taken = counts.withLockedValue { counts in
            let held = counts[key, default: 0]
            guard held < limit else { return false }
            counts[key] = held + 1
            return true
        }
        return taken ? Slot(owner: self, key: key) : nil
    }

    /// Slots `key` holds now.
    public func held(_ key: String) -> Int { counts.withLockedValue { $0[key, default: 0] } }

    fileprivate func giveBack(_ key: String) {
        counts.withLockedValue { counts in
            let held = counts[key, default: 1] - 1
            counts[key] = held > 0 ? held : nil
        }
    }
}

extension ConcurrencyLimiter {
    /// A slot for `key`, or 429 `rate_limited` (retry after a second), counted in
    /// `syncline_rate_limited_total{limit=…}`.
    public func check(_ key: String, limit name: String) throws(APIError) -> Slot {
        guard let slot = acquire(key) else {
            Counter(label: "syncline_rate_limited_total", dimensions: [("limit", name)]).increment()
            throw APIError.tooMany("At most \(limit) \(name) at once; retry when one has finished.", limit: limit, retryAfter: 1)
        }
        return slot
    }
}
