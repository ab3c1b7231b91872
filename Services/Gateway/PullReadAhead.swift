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
/// Bounded: at most `capacity` pages are kept or being read (past that none is read
/// ahead), and one not asked for within `lifetime` is dropped.
final class PullReadAhead: Sendable {
    /// The parameters that make a page: a request takes only a page read for exactly these.
    struct Key: Hashable, Sendable {
        let user: UserID
        let space: String?
        let since: Int64
        let limit: Int
        let collections: [String]?
        let minCursor: Int64?
        let form: PullForm
    }

    typealias Read = @Sendable (Key) async throws -> PullStore.Outcome

    private struct Entry {
        let task: Task<PullStore.Outcome, any Error>
        let started: ContinuousClock.Instant
    }

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

    /// Starts reading the page after the one answered for `key`, from its `cursor`, when it
    /// had more to follow (`cursor` nil: it had not) and there is room.
    func readAhead(from cursor: String?, of key: Key) {
        guard capacity > 0, let cursor = cursor.flatMap({ Int64($0) }) else { return }
        let next = Key(
            user: key.user, space: key.space, since: cursor, limit: key.limit, collections: key.collections,
            minCursor: key.minCursor, form: key.form)
        let now = ContinuousClock.now
        entries.withLockedValue { entries in
            let stale = entries.filter { now - $0.value.started >= lifetime }.keys
            for key in stale { entries.removeValue(forKey: key)?.task.cancel() }
            Self.dropped.increment(by: stale.count)
            guard entries[next] == nil, entries.count < capacity else { return }
            let read = read
            entries[next] = Entry(task: Task { try await read(next) }, started: now)
        }
    }
}
