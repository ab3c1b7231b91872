import Foundation

/// When the key set is fetched again: at once when never loaded (at most every 2 s),
/// hourly after a success (retrying every 30 s while that fails), and for a `kid` it does
/// not hold, at most once per 30 s — so tokens with made-up `kid`s cannot make Syncline
/// hammer the identity provider.
public struct JWKSRefreshSchedule: Sendable, Equatable {
    public var loadedAt: Date?
    public var lastAttempt = Date.distantPast
    public var lastUnknownKid = Date.distantPast

    public static let refreshEvery: TimeInterval = 3600
    public static let unknownKidEvery: TimeInterval = 30
    public static let retryEvery: TimeInterval = 30
    public static let firstLoadRetryEvery: TimeInterval = 2

    public init() {}

    public mutating func shouldRefresh(now: Date, kidKnown: Bool) -> Bool {
        guard let loadedAt else { return now.timeIntervalSince(lastAttempt) >= Self.firstLoadRetryEvery }
        if now.timeIntervalSince(loadedAt) >= Self.refreshEvery, now.timeIntervalSince(lastAttempt) >= Self.retryEvery {
            return true
        }
        if !kidKnown, now.timeIntervalSince(lastUnknownKid) >= Self.unknownKidEvery {
            lastUnknownKid = now
            return true
        }
        return false
    }

    public mutating func attempted(at date: Date) { lastAttempt = date }
    public mutating func succeeded(at date: Date) { loadedAt = date }
}
