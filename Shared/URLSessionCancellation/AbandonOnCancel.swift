import Foundation

/// Runs network work so that cancelling the caller never cancels a `URLSessionTask`: on
/// Linux, `URLSessionTask.cancel` can deadlock against Foundation's networking thread
/// (swift-corelibs-foundation; `cancel` → `DispatchQueue.sync` while that thread waits in
/// its status lock), and `URLSession`'s async methods cancel their task when the calling
/// task is cancelled. Here the work runs in a task of its own, which is never cancelled; a
/// cancelled caller gets `CancellationError` at once and the abandoned request ends by its
/// own timeout. Wherever a task that may be cancelled awaits a request, it goes through here.
public enum AbandonOnCancel {
    public static func run<T: Sendable>(_ work: @escaping @Sendable () async throws -> T) async throws -> T {
        let outcome = Outcome<T>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                outcome.wait(continuation)
                Task {
                    do { outcome.finish(.success(try await work())) } catch { outcome.finish(.failure(error)) }
                }
            }
        } onCancel: {
            outcome.finish(.failure(CancellationError()))
        }
    }

    /// The first result, handed to the continuation exactly once — whichever of the two
    /// (result, continuation) arrives second delivers it.
    final class Outcome<T: Sendable>: @unchecked Sendable {
        // @unchecked: every field is read and written under `lock`.
        private let lock = NSLock()
        private var continuation: CheckedContinuation<T, any Error>?
        private var result: Result<T, any Error>?

        func wait(_ continuation: CheckedContinuation<T, any Error>) {
            let ready: Result<T, any Error>? = lock.withLock {
                if result == nil { self.continuation = continuation }
                return result
            }
            if let ready { continuation.resume(with: ready) }
        }

        func finish(_ outcome: Result<T, any Error>) {
            let waiting: CheckedContinuation<T, any Error>? = lock.withLock {
                guard result == nil else { return nil }
                result = outcome
                defer { continuation = nil }
                return continuation
            }
            waiting?.resume(with: outcome)
        }
    }
}
