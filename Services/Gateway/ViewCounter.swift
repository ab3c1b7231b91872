import Logging
import NIOConcurrencyHelpers
import Persistence
import ServiceLifecycle

/// Public record views, counted in memory and added to PostgreSQL in one statement a
/// second, so popular reads never turn into a row-lock queue. Views not yet flushed are
/// included in answers from this gateway; a crash loses at most a second of counts.
final class ViewCounter: Service, Sendable {
    private let counts = NIOLockedValueBox<[String: Int]>([:])
    private let store: PublicStore
    private let logger: Logger

    init(store: PublicStore, logger: Logger) {
        self.store = store
        self.logger = logger
    }

    /// Counts one view; returns the views of this id not yet flushed, this one included.
    func count(_ publicID: String) -> Int {
        counts.withLockedValue { counts in
            counts[publicID, default: 0] += 1
            return counts[publicID]!
        }
    }

    func pending(_ publicID: String) -> Int {
        counts.withLockedValue { $0[publicID] ?? 0 }
    }

    func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .seconds(1)) }
            await flush()
        }
        await flush()
    }

    func flush() async {
        let batch = counts.withLockedValue { counts in
            defer { counts = [:] }
            return counts
        }
        guard !batch.isEmpty else { return }
        do {
            try await store.addViews(batch)
        } catch {
            // Put them back for the next flush.
            counts.withLockedValue { counts in counts.merge(batch, uniquingKeysWith: +) }
            logger.debug("view counts not flushed yet", metadata: ["error": "\(error)"])
        }
    }
}
