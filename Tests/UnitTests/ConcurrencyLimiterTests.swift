import HTTPSupport
import Testing

/// Slots per key: taken up to the limit, given back once however the work ends.
struct ConcurrencyLimiterTests {
    @Test func aKeyHoldsAtMostTheLimitAndOthersAreUnaffected() throws {
        let limiter = ConcurrencyLimiter(limit: 2)
        let first = try #require(limiter.acquire("alice"))
        let second = try #require(limiter.acquire("alice"))
        #expect(limiter.acquire("alice") == nil)
        #expect(limiter.acquire("bob") != nil)
        first.release()
        first.release()  // once only
        #expect(limiter.held("alice") == 1)
        let third = try #require(limiter.acquire("alice"))
        #expect(limiter.acquire("alice") == nil)
        second.release()
        third.release()
        #expect(limiter.held("alice") == 0)
    }

    @Test func aDroppedSlotIsGivenBack() throws {
        let limiter = ConcurrencyLimiter(limit: 1)
        do {
            let slot = limiter.acquire("reader")
            #expect(slot != nil)
        }
        #expect(limiter.held("reader") == 0)
        #expect(throws: APIError.self) {
            let held = try limiter.check("reader", limit: "downloads")
            defer { held.release() }
            _ = try limiter.check("reader", limit: "downloads")
        }
    }
}
