import Foundation

/// Values to any number of consumers: each subscription is a stream of its own that
/// receives every value from then on (the newest `buffer` kept while it lags), and, when
/// `replaysLatest`, the latest value at once.
final class Broadcast<Element: Sendable>: @unchecked Sendable {
    // @unchecked: `subscribers` and `latest` are only read and written under `lock`.
    private let lock = NSLock()
    private var subscribers: [UUID: AsyncStream<Element>.Continuation] = [:]
    private var latest: Element?
    private let buffer: Int
    private let replaysLatest: Bool

    init(buffer: Int, replaysLatest: Bool = false) {
        self.buffer = buffer
        self.replaysLatest = replaysLatest
    }

    func subscribe() -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream.makeStream(of: Element.self, bufferingPolicy: .bufferingNewest(buffer))
        let id = UUID()
        let current: Element? = lock.withLock {
            subscribers[id] = continuation
            return replaysLatest ? latest : nil
        }
        if let current { continuation.yield(current) }
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            _ = self.lock.withLock { self.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    func yield(_ element: Element) {
        let receivers = lock.withLock {
            if replaysLatest { latest = element }
            return Array(subscribers.values)
        }
        for continuation in receivers { continuation.yield(element) }
    }
}
