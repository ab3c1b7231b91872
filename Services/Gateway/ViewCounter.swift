import Foundation
import Logging
import NIOConcurrencyHelpers
import Persistence

/// Public record views, counted in memory and added to PostgreSQL in one statement a
/// second, so popular reads never turn into a row-lock queue. Views not yet flushed are
/// included in answers from this gateway; a crash loses at most a second of counts.
///
/// A view is a reader's (client address's) first read of a record in an hour: readers
/// seen are kept in two generations — this hour's and the last — so a re-read within one
/// to two hours counts nothing, and memory stays bounded (a generation that reaches
/// `maxReaders` is retired early).
final class ViewCounter: Sendable {
    private struct Readers {
        var current = Set<String>()
        var previous = Set<String>()
        var rotatedAt: Double
    }

    /// Views not yet added, by public id: written with the gateway's other services.
    let counts: WriteBehind<String, Int>
    private let readers: NIOLockedValueBox<Readers>
    private let clock: @Sendable () -> Double
    static let window: Double = 3600
    static let maxReaders = 100_000

    init(store: PublicStore, logger: Logger, clock: @escaping @Sendable () -> Double = { ProcessInfo.processInfo.systemUptime }) {
        counts = WriteBehind("view counts", logger: logger, merge: +) { try await store.addViews($0) }
        self.clock = clock
        self.readers = NIOLockedValueBox(Readers(rotatedAt: clock()))
    }

    /// Counts a view of `publicID` by `reader` unless they read it within the hour; returns
    /// the views of this id not yet flushed.
    func count(_ publicID: String, reader: String) -> Int {
        let now = clock(), key = reader + " " + publicID
        let isNew = readers.withLockedValue { readers in
            if now - readers.rotatedAt >= Self.window || readers.current.count >= Self.maxReaders {
                readers.previous = readers.current
                readers.current = []
                readers.rotatedAt = now
            }
            guard !readers.previous.contains(key) else { return false }
            return readers.current.insert(key).inserted
        }
        return counts.withPending { counts in
            if isNew { counts[publicID, default: 0] += 1 }
            return counts[publicID] ?? 0
        }
    }

    func pending(_ publicID: String) -> Int {
        counts.withPending { $0[publicID] ?? 0 }
    }
}
