import Foundation
import Logging
import NIOConcurrencyHelpers
import ServiceLifecycle

/// Values kept in memory by key and written to PostgreSQL in one statement a second, and
/// once more at shutdown, so that what many requests note never turns into a write each. A
/// write that fails puts its batch back, merged with what was noted meanwhile; a crash
/// loses at most a second.
final class WriteBehind<Key: Hashable & Sendable, Value: Sendable>: Service, Sendable {
    private let pending = NIOLockedValueBox<[Key: Value]>([:])
    private let write: @Sendable ([Key: Value]) async throws -> Void
    /// How a value noted since combines with one put back: `(noted, putBack)`.
    private let merge: @Sendable (Value, Value) -> Value
    private let logger: Logger
    private let what: String

    init(
        _ what: String, logger: Logger, merge: @escaping @Sendable (Value, Value) -> Value,
        write: @escaping @Sendable ([Key: Value]) async throws -> Void
    ) {
        self.what = what
        self.logger = logger
        self.merge = merge
        self.write = write
    }

    /// Reads or changes what waits to be written.
    func withPending<T>(_ body: (inout [Key: Value]) -> T) -> T {
        pending.withLockedValue(body)
    }

    func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .seconds(1)) }
            await flush()
        }
        await flush()
    }

    func flush() async {
        let batch = pending.withLockedValue { pending in
            defer { pending = [:] }
            return pending
        }
        guard !batch.isEmpty else { return }
        do {
            try await write(batch)
        } catch {
            pending.withLockedValue { pending in pending.merge(batch, uniquingKeysWith: merge) }
            logger.debug("\(what) not written yet", metadata: ["error": "\(error)"])
        }
    }
}
