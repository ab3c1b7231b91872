import Foundation
import SyncModels

/// Remembers what was reported, so that each thing is reported once (at most `limit` kept;
/// past it, the memory starts over).
final class ReportedOnce<Element: Hashable & Sendable>: Sendable {
    private let seen = Locked(Set<Element>())
    private let limit: Int

    init(limit: Int = 10_000) { self.limit = limit }

    /// The elements not reported before, now remembered.
    func firstTime(_ elements: [Element]) -> [Element] {
        guard !elements.isEmpty else { return [] }
        return seen.withLock { seen in
            if seen.count + elements.count > limit { seen.removeAll() }
            return elements.filter { seen.insert($0).inserted }
        }
    }
}
