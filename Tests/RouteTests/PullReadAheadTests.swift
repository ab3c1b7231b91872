@testable import Gateway
import NIOConcurrencyHelpers
import Persistence
import SyncModels
import Testing

/// The read-ahead of pull pages, with pages that are counted rather than read: a request
/// takes the page read for exactly its parameters, once; a page not taken in time, one
/// whose reading failed, or one past the capacity is read again for the request.
@Suite struct PullReadAheadTests {
    final class Reads: Sendable {
        let keys = NIOLockedValueBox<[PullReadAhead.Key]>([])
        let failing = NIOLockedValueBox(false)
        var count: Int { keys.withLockedValue(\.count) }
    }

    func key(since: Int64, user: String = "u", form: PullForm = .compact, minCursor: Int64? = nil) -> PullReadAhead.Key {
        PullReadAhead.Key(user: UserID(user), space: nil, since: since, limit: 100, collections: nil, minCursor: minCursor, form: form)
    }

    /// `lifetime`: long unless a test is about it, so that a page read ahead is still there
    /// however slowly a loaded machine runs the test.
    func readAhead(capacity: Int, lifetime: Duration = .seconds(300), _ reads: Reads) -> PullReadAhead {
        PullReadAhead(capacity: capacity, lifetime: lifetime) { key in
            reads.keys.withLockedValue { $0.append(key) }
            if reads.failing.withLockedValue({ $0 }) { throw UnexpectedAnswer("down") }
            return .resyncRequired
        }
    }

    /// Let the tasks started run.
    func settle(_ reads: Reads, until count: Int) async throws {
        for _ in 0..<500 where reads.count < count { try await Task.sleep(for: .milliseconds(2)) }
    }

    @Test func aRequestTakesThePageReadAheadForExactlyItsParametersOnce() async throws {
        let reads = Reads()
        let pages = readAhead(capacity: 4, reads)
        _ = try await pages.page(key(since: 0))
        pages.readAhead(from: 100, of: key(since: 0))
        try await settle(reads, until: 2)
        #expect(reads.keys.withLockedValue { $0 } == [key(since: 0), key(since: 100)])

        _ = try await pages.page(key(since: 100))
        #expect(reads.count == 2, "taken, not read again")
        _ = try await pages.page(key(since: 100))
        #expect(reads.count == 3, "taken once")

        pages.readAhead(from: 200, of: key(since: 100))
        try await settle(reads, until: 4)
        for other in [key(since: 200, user: "v"), key(since: 200, form: .full), key(since: 200, minCursor: 250), key(since: 199)] {
            _ = try await pages.page(other)
        }
        #expect(reads.count == 8, "another user, form, min_cursor or cursor reads its own page")
        _ = try await pages.page(key(since: 200))
        #expect(reads.count == 8)

        pages.readAhead(from: nil, of: key(since: 200))
        try await Task.sleep(for: .milliseconds(20))
        #expect(reads.count == 8, "a last page has nothing after it")
    }

    @Test func pagesPastTheCapacityOrTheirLifetimeOrFailedAreReadForTheRequest() async throws {
        let reads = Reads()
        let pages = readAhead(capacity: 2, reads)
        for since in [10, 20, 30] as [Int64] { pages.readAhead(from: since, of: key(since: 0, user: "u\(since)")) }
        try await settle(reads, until: 2)
        try await Task.sleep(for: .milliseconds(20))
        #expect(reads.count == 2, "two kept at most")
        _ = try await pages.page(key(since: 30, user: "u30"))
        #expect(reads.count == 3)

        let short = readAhead(capacity: 2, lifetime: .milliseconds(1), reads)
        short.readAhead(from: 5, of: key(since: 0))
        try await settle(reads, until: 4)
        try await Task.sleep(for: .milliseconds(5))
        _ = try await short.page(key(since: 5))
        #expect(reads.count == 5, "too old: read again")

        reads.failing.withLockedValue { $0 = true }
        let failing = readAhead(capacity: 2, reads)
        failing.readAhead(from: 7, of: key(since: 0))
        try await settle(reads, until: 6)
        await #expect(throws: UnexpectedAnswer.self) { try await failing.page(key(since: 7)) }
        #expect(reads.count == 7, "a failed read ahead is read again for the request, which hears its error")
    }

    /// Two pages are read ahead of the one taken: each page read passes the wish on to the
    /// next, and a request that takes one tops the chain up again. None past the last page.
    @Test func twoPagesAreReadAheadOfTheOneTakenAndNoneAfterTheLast() async throws {
        let reads = Reads()
        let pages = PullReadAhead(capacity: 8, lifetime: .seconds(300)) { key in
            reads.keys.withLockedValue { $0.append(key) }
            let more = key.since < 50
            return .page(PulledPage(json: [], count: 0, cursor: String(more ? key.since + 10 : 60), hasMore: more))
        }
        func read() -> [Int64] { reads.keys.withLockedValue { $0.map(\.since) } }
        _ = try await pages.page(key(since: 0))
        pages.readAhead(from: 10, of: key(since: 0))
        try await settle(reads, until: 3)
        try await Task.sleep(for: .milliseconds(20))
        #expect(read() == [0, 10, 20], "two ahead")
        for since in [10, 20, 30, 40, 50] as [Int64] {
            let outcome = try await pages.page(key(since: since))
            pages.readAhead(from: PullReadAhead.next(after: outcome), of: key(since: since))
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(read() == [0, 10, 20, 30, 40, 50], "each page read once, ahead of its request; nothing after the last")
    }
}
