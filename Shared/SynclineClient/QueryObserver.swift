import Foundation

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
final class CoalescedWork<Pending: Sendable>: @unchecked Sendable {
    // @unchecked: `turns` and `cancelled` are read and written under `lock`.
    private let lock = NSLock()
    private var turns = TakingTurns<Pending>()
    private var cancelled = false
    private let merge: @Sendable (Pending, Pending) -> Pending
    private let work: @Sendable (Pending) async -> Void

    init(merge: @escaping @Sendable (Pending, Pending) -> Pending, work: @escaping @Sendable (Pending) async -> Void) {
        self.merge = merge
        self.work = work
    }

    func request(_ next: Pending) {
        let leads = lock.withLock { !cancelled && turns.arrive(next) }
        if leads { Task.detached { await self.run(next) } }
    }

    func cancel() {
        lock.withLock {
            cancelled = true
            _ = turns.cancelWaiting()
        }
    }

    /// Runs for `first` and the requests merged into it, then for whoever waited meanwhile,
    /// until nobody waits.
    private func run(_ first: Pending) async {
        var leader: Pending? = first
        while let next = leader {
            let merged = lock.withLock { cancelled ? nil : turns.takeWaiting().reduce(next, merge) }
            if let merged { await work(merged) }
            leader = lock.withLock { turns.finish() }
        }
    }
}

/// One observed query. A change wakes it only when it can affect the results: a changed
/// record is among the current results, or passes the filter now. The results are then
/// read again — on a reader connection, off the write path — and delivered only when
/// they differ from the last ones delivered.
final class QueryObserver: @unchecked Sendable {
    // @unchecked: `last` and `delivered` are touched only by `refresh`, which
    // `CoalescedWork` never runs twice at once.
    let query: RecordQuery
    private var last: [LocalRecord] = []
    private var lastIDs: Set<String> = []
    private var delivered = false
    private var work: CoalescedWork<ChangedRecords>!

    init(query: RecordQuery, store: LocalStore, deliver: @escaping @Sendable ([LocalRecord]) -> Void) {
        self.query = query
        work = CoalescedWork(merge: { $0.merged(with: $1) }) { [weak self] changed in
            self?.refresh(changed, store: store, deliver: deliver)
        }
        work.request(.all)
    }

    func changed(_ records: ChangedRecords) { work.request(records) }

    func cancel() { work.cancel() }

    private func refresh(_ changed: ChangedRecords, store: LocalStore, deliver: ([LocalRecord]) -> Void) {
        if delivered, case .some(let ids) = changed, ids.isDisjoint(with: lastIDs),
           (try? store.anyMatches(query, ids: ids)) == false {
            return
        }
        guard let results = try? store.records(query) else { return }
        if delivered && results == last { return }
        last = results
        lastIDs = Set(results.map(\.id))
        delivered = true
        deliver(results)
    }
}
