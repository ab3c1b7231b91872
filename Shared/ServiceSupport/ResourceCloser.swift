import ServiceLifecycle

/// Closes shared resources (broker connections) once every service listed after
/// it in the group has stopped: the group shuts services down in reverse order.
public struct ResourceCloser: Service {
    let close: @Sendable () async -> Void

    public init(close: @escaping @Sendable () async -> Void) { self.close = close }

    public func run() async throws {
        try? await gracefulShutdown()
        await close()
    }
}
