import Foundation

/// Remembers what was reported, so that each thing is reported once (at most `limit` kept;
/// past it, the memory starts over).
final class ReportedOnce<Element: Hashable & Sendable>: @unchecked Sendable {
    // @unchecked: `seen` is only read and written under `lock`.
    private let lock = NSLock()
    private var seen = Set<Element>()
    private let limit: Int

    init(limit: Int = 10_000) { self.limit = limit }

    /// The elements not reported before, now remembered.
    func firstTime(_ elements: [Element]) -> [Element] {
        guard !elements.isEmpty else { return [] }
        return lock.withLock {
            if seen.count + elements.count > limit { seen.removeAll() }
            return elements.filter { seen.insert($0).inserted }
        }
    }
}
