import Foundation
import SynclineClient

/// The observations behind a live model, on the main actor: one of a request's results,
/// one of the client's status. Following another request ends the old observation first,
/// and a result of the old one never shows after that: the ending and every delivery both
/// happen on the main actor, and a delivery first checks that its observation still
/// stands. Everything ends when the model goes.
@MainActor
final class LiveFollower {
    private let tasks = TaskSlots()
    private weak var statusClient: SyncClient?

    /// Follows what `open` yields from `client`, instead of whatever was followed before.
    func follow<Value: Sendable>(
        _ client: SyncClient, open: @escaping @Sendable (SyncClient) async throws -> AsyncStream<Value>,
        show: @escaping @MainActor (Value) -> Void, failed: @escaping @MainActor (ClientError?) -> Void
    ) {
        tasks.replace(.results, with: Task { @MainActor in
            do {
                for await value in try await open(client) {
                    guard !Task.isCancelled else { return }
                    show(value)
                }
            } catch {
                if !Task.isCancelled { failed(error as? ClientError) }
            }
        })
    }

    /// Follows `client`'s status (once per client).
    func followStatus(_ client: SyncClient, show: @escaping @MainActor (SyncStatus) -> Void) {
        guard statusClient !== client else { return }
        statusClient = client
        let updates = client.statusUpdates
        tasks.replace(.status, with: Task { @MainActor in
            for await status in updates {
                guard !Task.isCancelled else { return }
                show(status)
            }
        })
    }
}

/// A follower's tasks, cancelled when replaced and when the follower goes (a deinit runs
/// on no actor: hence a lock, never contended).
final class TaskSlots: @unchecked Sendable {
    enum Slot { case results, status }
    private let lock = NSLock()
    private var tasks: [Slot: Task<Void, Never>] = [:]

    func replace(_ slot: Slot, with task: Task<Void, Never>) {
        lock.withLock { tasks.updateValue(task, forKey: slot) }?.cancel()
    }

    deinit { tasks.values.forEach { $0.cancel() } }
}

/// What a live query shows, whichever way it is observed (`@Observable` or `ObservableObject`).
struct LiveQueryState<Record: SyncRecord> {
    var request: RecordRequest<Record>
    var rows: [RecordRow<Record>] = []
    var failures: [UndecodableRecord] = []
    /// True from a request until its first results: the rows shown meanwhile are the last
    /// request's (a list does not flash empty on each keystroke of a search).
    var isLoading = true
    var error: ClientError?

    mutating func requested(_ next: RecordRequest<Record>) {
        request = next
        isLoading = true
    }

    mutating func show(_ results: QueryResults<Record>) {
        (rows, failures, isLoading, error) = (results.rows, results.failures, false, nil)
    }

    mutating func fail(_ error: ClientError?) {
        (self.error, isLoading) = (error, false)
    }
}
