import Foundation
import SyncModels

/// Values to any number of consumers: each subscription is a stream of its own that
/// receives every value from then on (the newest `buffer` kept while it lags), and, when
/// `replaysLatest`, the latest value at once.
final class Broadcast<Element: Sendable>: Sendable {
    private struct State {
        var subscribers: [UUID: AsyncStream<Element>.Continuation] = [:]
        var latest: Element?
    }

    private let state = Locked(State())
    private let buffer: Int
    private let replaysLatest: Bool

    init(buffer: Int, replaysLatest: Bool = false) {
        self.buffer = buffer
        self.replaysLatest = replaysLatest
    }

    func subscribe() -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream.makeStream(of: Element.self, bufferingPolicy: .bufferingNewest(buffer))
        let id = UUID()
        let current: Element? = state.withLock { state in
            state.subscribers[id] = continuation
            return replaysLatest ? state.latest : nil
        }
        if let current { continuation.yield(current) }
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            _ = self.state.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    func yield(_ element: Element) {
        let receivers = state.withLock { state in
            if replaysLatest { state.latest = element }
            return Array(state.subscribers.values)
        }
        for continuation in receivers { continuation.yield(element) }
    }
}
