import Foundation
import SyncModels

/// Test-only fault injection. Compiled into debug builds only — release builds, which
/// `scripts/up` and the Docker image run, contain none — and off unless its environment
/// variable is set.
public enum Failpoints {
    #if DEBUG
    /// The gateway waits this long between committing a job and answering and publishing
    /// it, so a test can kill it in between (`SYNCLINE_FAILPOINT_PAUSE_BEFORE_PUBLISH=3s`).
    public static let pauseBeforePublish: Double? = ProcessInfo.processInfo
        .environment["SYNCLINE_FAILPOINT_PAUSE_BEFORE_PUBLISH"].flatMap(Durations.parse)
    #else
    public static let pauseBeforePublish: Double? = nil
    #endif
}
