import Metrics
import NIOConcurrencyHelpers
import Persistence
import SyncModels

/// The next page of a pull, read while the device is still taking in this one. A full pull
/// is a chain of requests, each waiting for the one before: without reading ahead,
/// PostgreSQL and the gateway idle while the device parses and stores a page, and the
/// device idles while they make the next. Once a page with more to follow is answered,
/// the page after it is read with the same parameters; the request for it takes that page,
/// or waits for it when it is still being read.
///
/// A page read ahead is a snapshot of its space a few milliseconds before the request —
/// as if the request had come that much earlier, which no guarantee forbids: every page is
/// its own snapshot, its cursor the last version it holds or the counter it saw, so a
/// change committed after it has a higher version and comes in a later page; a job's
/// checkpoint is reached only by a page that saw it. What a request is allowed to see is
/// decided by the route before it takes a page (membership, the caller's token), as for a
/// page read for it.
///
/// Two pages ahead: the database and the gateway then make one page while another goes
/// out, and the device takes in a third. Bounded: at most `capacity` pages are kept or
/// being read (past that none is read ahead), and one not asked for within `lifetime` is
/// dropped.
final class PullReadAhead: Sendable {
    /// The parameters that make a page: a request takes only a page read for exactly these.
    struct Key: Hashable, Sendable {
        let user: UserID
        let space: SpaceID?
        let since: Int64
        let limit: Int
        let collections: [String]?
        let minCursor: Int64?
        let form: PullForm

        /// The same pull's page from `cursor`.
        func from(_ cursor: Int64) -> Key {
            Key(user: user, space: space, since: cursor, limit: limit, collections: collections, minCursor: minCursor, form: form)
        }
    }

    typealias Read = @Sendable (Key) async throws -> PullStore.Outcome

    private struct Entry {
        let task: Task<PullStore.Outcome, any Error>
        let started: ContinuousClock.Instant
        /// The pages to read after this one once it is read (it is the first of them).
        var ahead: Int
        /// Where the page after it starts, once it is read and has more to follow.
        var next: Int64?
    }

    /// Pages read ahead of the one a request takes.
    static let depth = 2

    let capacity: Int
    let lifetime: Duration
    private let read: Read
    private let entries = NIOLockedValueBox<[Key: Entry]>([:])
    private static let hits = Counter(label: "syncline_pull_read_ahead_total", dimensions: [("outcome", "taken")])
    private static let dropped = Counter(label: "syncline_pull_read_ahead_total", dimensions: [("outcome", "dropped")])

    init(capacity: Int, lifetime: Duration = .seconds(10), read: @escaping Read) {
        self.capacity = capacity
        self.lifetime = lifetime
        self.read = read
    }

    /// The page for `key`: the one read ahead when there is one, else read now.
    func page(_ key: Key) async throws -> PullStore.Outcome {
        let entry = entries.withLockedValue { $0.removeValue(forKey: key) }
        if let entry, ContinuousClock.now - entry.started < lifetime, let outcome = try? await entry.task.value {
            Self.hits.increment()
            return outcome
        }
        return try await read(key)
    }

    /// Where the page after `outcome` starts: nil when it is a last page, or no page.
    static func next(after outcome: PullStore.Outcome) -> Int64? {
        guard case .page(let page) = outcome, page.hasMore else { return nil }
        return Int64(page.cursor)
    }

    /// Reads the pages after the one answered for `key` — from its `cursor`, `depth` of
    /// them — unless they are read already or there is no room. `cursor` nil: that page
    /// was the last.
    func readAhead(from cursor: Int64?, of key: Key) {
        guard capacity > 0, let cursor else { return }
        let now = ContinuousClock.now
        entries.withLockedValue { entries in
            let stale = entries.filter { now - $0.value.started >= lifetime }.keys
            for key in stale { entries.removeValue(forKey: key)?.task.cancel() }
            Self.dropped.increment(by: stale.count)
            ensure(key.from(cursor), ahead: Self.depth, in: &entries, now: now)
        }
    }

    /// Makes sure `key` and the `ahead - 1` pages after it are read or being read: a page
    /// already read passes the rest on to its successor, one being read does when it is.
    private func ensure(_ key: Key, ahead: Int, in entries: inout [Key: Entry], now: ContinuousClock.Instant) {
        guard ahead > 0 else { return }
        if var entry = entries[key] {
            guard entry.ahead < ahead else { return }
            entry.ahead = ahead
            entries[key] = entry
            if let next = entry.next { ensure(key.from(next), ahead: ahead - 1, in: &entries, now: now) }
            return
        }
        guard entries.count < capacity else { return }
        let read = read
        let task = Task { [weak self] in
            let outcome = try await read(key)
            self?.finished(key, reaching: Self.next(after: outcome))
            return outcome
        }
        entries[key] = Entry(task: task, started: now, ahead: ahead)
    }

    /// A page read ahead for `key` is read: the pages wanted after it are started.
    private func finished(_ key: Key, reaching next: Int64?) {
        entries.withLockedValue { entries in
            guard var entry = entries[key] else { return }
            entry.next = next
            entries[key] = entry
            if let next { ensure(key.from(next), ahead: entry.ahead - 1, in: &entries, now: ContinuousClock.now) }
        }
    }
}
