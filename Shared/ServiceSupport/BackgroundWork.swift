import ServiceLifecycle

/// Work that outlives the request or event that started it (the rest of a large account's
/// erasure, an intake slot, a broker unbind) runs here, as a child of this service rather
/// than as a detached task: on shutdown it is waited for, and cancelled when the group's
/// grace period ends.
///
/// List it before the services that submit to it: a service group stops its services in
/// reverse order (the HTTP server first), so nothing is submitted once it is stopping.
public final class BackgroundWork: Service, Sendable {
    public typealias Work = @Sendable () async -> Void

    private let stream: AsyncStream<Work>
    private let continuation: AsyncStream<Work>.Continuation

    public init() {
        (stream, continuation) = AsyncStream.makeStream(of: Work.self)
    }

    /// Starts `work` as a child of this service; false, running nothing, once it has stopped.
    @discardableResult
    public func submit(_ work: @escaping Work) -> Bool {
        if case .enqueued = continuation.yield(work) { return true }
        return false
    }

    public func run() async {
        await withDiscardingTaskGroup { group in
            await withGracefulShutdownHandler {
                for await work in stream { group.addTask { await work() } }
            } onGracefulShutdown: {
                self.continuation.finish()
            }
        }
    }
}
