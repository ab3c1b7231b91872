import SyncModels
import Testing

@Suite("Taking turns")
struct TakingTurnsTests {
    /// Callers arriving in order: which of them lead a run at once.
    func arrivals<W>(_ turns: inout TakingTurns<W>, _ waiters: W...) -> [Bool] {
        waiters.map { turns.arrive($0) }
    }

    @Test func theFirstCallerLeadsAtOnceAndTheWorkStopsWhenNobodyWaits() {
        var turns = TakingTurns<String>()
        #expect(arrivals(&turns, "a") == [true])
        #expect(turns.isRunning)
        let waiting = turns.takeWaiting(), next = turns.finish()
        #expect(waiting.isEmpty && next == nil)
        #expect(!turns.isRunning)
        #expect(arrivals(&turns, "b") == [true], "after the work stopped, the next caller leads again")
    }

    @Test func callersDuringARunAreServedTogetherByTheNextRunLedByTheFirstOfThem() {
        var turns = TakingTurns<String>()
        #expect(arrivals(&turns, "leader") == [true])
        let first = turns.takeWaiting()
        #expect(first.isEmpty)
        #expect(arrivals(&turns, "b", "c", "d") == [false, false, false])
        let next = turns.finish()
        #expect(next == "b", "the first waiting leads the next run")
        #expect(turns.isRunning)
        let served = turns.takeWaiting()
        #expect(served == ["c", "d"], "it serves everyone who waited for it")
        let after = turns.finish()
        #expect(after == nil)
    }

    @Test func aRequestMadeAfterARunStartedWaitsForTheNextRun() {
        var turns = TakingTurns<Int>()
        #expect(arrivals(&turns, 1, 2) == [true, false])
        let second = turns.finish()
        let servedBySecond = turns.takeWaiting()
        #expect(second == 2 && servedBySecond.isEmpty)
        #expect(arrivals(&turns, 3) == [false], "3 arrived after run 2 took its requests")
        let third = turns.finish()
        let servedByThird = turns.takeWaiting()
        let end = turns.finish()
        #expect(third == 3 && servedByThird.isEmpty && end == nil)
    }

    @Test func cancellingHandsBackEveryWaitingRequest() {
        var turns = TakingTurns<Int>()
        #expect(arrivals(&turns, 1, 2, 3) == [true, false, false])
        let dropped = turns.cancelWaiting()
        let next = turns.finish()
        #expect(dropped == [2, 3] && next == nil)
    }

    @Test func requestsARunCouldNotServeWaitAgainAheadOfLaterOnes() {
        var turns = TakingTurns<Int>()
        #expect(arrivals(&turns, 1, 2, 3) == [true, false, false])
        let taken = turns.takeWaiting()
        #expect(arrivals(&turns, 4) == [false])
        turns.putBack(taken)
        let next = turns.finish()
        let served = turns.takeWaiting()
        #expect(next == 2 && served == [3, 4])
    }
}
