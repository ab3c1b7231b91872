import Foundation

/// A value read and written only under its lock: the one type in the clients and services
/// that makes mutable state shareable with a lock (the clients' oldest systems lack
/// `Synchronization.Mutex`). State that a lock guards lives in one of these, so the
/// compiler, not a comment, checks that nothing touches it outside the lock.
public final class Locked<Value: Sendable>: @unchecked Sendable {
    // @unchecked: `value` is only read and written inside `withLock`, under `lock`.
    private let lock = NSLock()
    private var value: Value

    public init(_ value: Value) { self.value = value }

    /// Runs `body` with the value, under the lock; keep it short, and never await in it.
    public func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
