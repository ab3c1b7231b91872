import Foundation

/// The client's events, to any number of consumers: each subscription is a stream of its
/// own that receives every event from then on (the newest 1,000 kept while it lags).
final class EventBroadcast: @unchecked Sendable {
    // @unchecked: `subscribers` is only read and written under `lock`.
    private let lock = NSLock()
    private var subscribers: [UUID: AsyncStream<SyncEvent>.Continuation] = [:]

    func subscribe() -> AsyncStream<SyncEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: SyncEvent.self, bufferingPolicy: .bufferingNewest(1_000))
        let id = UUID()
        lock.withLock { subscribers[id] = continuation }
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            _ = self.lock.withLock { self.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    func yield(_ event: SyncEvent) {
        for continuation in lock.withLock({ Array(subscribers.values) }) { continuation.yield(event) }
    }
}
