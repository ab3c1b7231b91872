import Foundation

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
