import Logging
import Persistence
import SyncModels

/// Where each device's pulls reached, for the support console: a pull that names its
/// device notes the cursor it answered, and one statement a second writes the newest mark
/// of each device and space. They are facts for people, never read by sync itself.
struct PullMarks: Sendable {
    /// Marks kept at most while the database cannot be written (newer ones are dropped).
    static let maxPending = 100_000

    let marks: WriteBehind<DeviceStore.PullMark.Key, DeviceStore.PullMark>

    init(devices: DeviceStore, logger: Logger) {
        marks = WriteBehind("pull marks", logger: logger, merge: { noted, _ in noted }) { try await devices.recordPulls(Array($0.values)) }
    }

    func note(_ mark: DeviceStore.PullMark) {
        marks.withPending { pending in
            guard pending.count < Self.maxPending || pending[mark.key] != nil else { return }
            pending[mark.key] = mark
        }
    }
}
