import Foundation
import SyncModels

/// Which records of a collection changed: some, by id, or possibly any.
enum ChangedRecords: Sendable, Equatable {
    case some(Set<String>)
    case all

    /// Beyond this many ids (a large pull), checking each costs more than reading the
    /// results again.
    static let most = 500

    static func records(_ ids: Set<String>) -> ChangedRecords { ids.count > most ? .all : .some(ids) }

    func merged(with other: ChangedRecords) -> ChangedRecords {
        switch (self, other) {
        case (.some(let these), .some(let those)): return .records(these.union(those))
        default: return .all
        }
    }
}

/// Runs `work` off the caller's path, once per burst of requests: a request made while it
/// runs makes it run once more afterwards, with every request since merged into one. So a
/// write only records that something changed, and any number of writes during a refresh
/// cost one more refresh. Requests take turns (`TakingTurns`); as nobody awaits them, the
/// runs of a burst go on one task, started by its first request.
final class CoalescedWork<Pending: Sendable>: Sendable {
    private struct State {
        var turns = TakingTurns<Pending>()
        var cancelled = false
        /// Callers of `cancelAndWait` waiting for the current run to end.
        var awaitingIdle: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Locked(State())
    private let merge: @Sendable (Pending, Pending) -> Pending
    private let work: @Sendable (Pending) async -> Void

    init(merge: @escaping @Sendable (Pending, Pending) -> Pending, work: @escaping @Sendable (Pending) async -> Void) {
        self.merge = merge
        self.work = work
    }

    func request(_ next: Pending) {
        let leads = state.withLock { !$0.cancelled && $0.turns.arrive(next) }
        if leads { Task.detached { await self.run(next) } }
    }

    func cancel() {
        state.withLock { state in
            state.cancelled = true
            _ = state.turns.cancelWaiting()
        }
    }

    /// Cancels, then returns once no run is under way: after it, `work` never runs again
    /// (what it reads can be closed).
    func cancelAndWait() async {
        await withCheckedContinuation { continuation in
            let idle = state.withLock { state in
                state.cancelled = true
                _ = state.turns.cancelWaiting()
                guard state.turns.isRunning else { return true }
                state.awaitingIdle.append(continuation)
                return false
            }
            if idle { continuation.resume() }
        }
    }

    /// Runs for `first` and the requests merged into it, then for whoever waited meanwhile,
    /// until nobody waits.
    private func run(_ first: Pending) async {
        var leader: Pending? = first
        while let next = leader {
            let merged = state.withLock { $0.cancelled ? nil : $0.turns.takeWaiting().reduce(next, merge) }
            if let merged { await work(merged) }
            let (next, idle) = state.withLock { state -> (Pending?, [CheckedContinuation<Void, Never>]) in
                guard let next = state.turns.finish() else {
                    let idle = state.awaitingIdle
                    state.awaitingIdle = []
                    return (nil, idle)
                }
                return (next, [])
            }
            for waiter in idle { waiter.resume() }
            leader = next
        }
    }
}

/// One observed query. A change wakes it only when it can affect the results: a changed
/// record is among the current results, or passes the filter now. The results are then
/// read again — on a reader connection, off the write path — and delivered only when
/// they differ from the last ones delivered.
final class QueryObserver: Sendable {
    /// The results last delivered. Only `refresh` touches them, and `CoalescedWork` never
    /// runs it twice at once: the lock is never contended.
    private struct Delivered {
        var results: [LocalRecord]?
        var ids: Set<String> = []
    }

    let query: RecordQuery
    private let work: CoalescedWork<ChangedRecords>

    init(query: RecordQuery, store: LocalStore, deliver: @escaping @Sendable ([LocalRecord]) -> Void) {
        self.query = query
        let delivered = Locked(Delivered())
        work = CoalescedWork(merge: { $0.merged(with: $1) }) { changed in
            Self.refresh(changed, query, store: store, delivered: delivered, deliver: deliver)
        }
        work.request(.all)
    }

    func changed(_ records: ChangedRecords) { work.request(records) }

    func cancel() { work.cancel() }

    /// Cancels, then returns once no refresh is under way.
    func cancelAndWait() async { await work.cancelAndWait() }

    private static func refresh(
        _ changed: ChangedRecords, _ query: RecordQuery, store: LocalStore, delivered: Locked<Delivered>,
        deliver: ([LocalRecord]) -> Void
    ) {
        let (last, lastIDs) = delivered.withLock { ($0.results, $0.ids) }
        if last != nil, case .some(let ids) = changed, ids.isDisjoint(with: lastIDs),
           (try? store.anyMatches(query, ids: ids)) == false {
            return
        }
        guard let results = try? store.records(query), results != last else { return }
        delivered.withLock { $0 = Delivered(results: results, ids: Set(results.map(\.id))) }
        deliver(results)
    }
}
