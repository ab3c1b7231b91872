import Foundation
import Logging
import NIOConcurrencyHelpers
import Persistence
import ServiceLifecycle
import SyncModels

/// Where each device's pulls reached, for the support console: a pull that names its
/// device notes the cursor it answered, and one statement a second writes the newest mark
/// of each device and space. A crash loses at most a second of marks; they are facts for
/// people, never read by sync itself.
final class PullMarks: Service, Sendable {
    private let pending = NIOLockedValueBox<[DeviceStore.PullMark.Key: DeviceStore.PullMark]>([:])
    private let devices: DeviceStore
    private let logger: Logger
    /// Marks kept at most while the database cannot be written (the oldest are dropped).
    static let maxPending = 100_000

    init(devices: DeviceStore, logger: Logger) {
        self.devices = devices
        self.logger = logger
    }

    func note(_ mark: DeviceStore.PullMark) {
        pending.withLockedValue { pending in
            guard pending.count < Self.maxPending || pending[mark.key] != nil else { return }
            pending[mark.key] = mark
        }
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
            try await devices.recordPulls(Array(batch.values))
        } catch {
            // Kept for the next flush unless a newer pull replaced them meanwhile.
            pending.withLockedValue { pending in pending.merge(batch, uniquingKeysWith: { newer, _ in newer }) }
            logger.debug("pull marks not written yet", metadata: ["error": "\(error)"])
        }
    }
}
