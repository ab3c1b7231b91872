import SyncModels

/// A flag one task sets and others read.
public final class Flag: Sendable {
    private let value = Locked(false)

    public init() {}

    public var isSet: Bool { value.withLock { $0 } }

    /// Sets the flag; true when this call is the one that set it.
    @discardableResult public func set() -> Bool {
        value.withLock { value in
            defer { value = true }
            return !value
        }
    }
}
