@testable import PQBridge
import Testing

/// The pool's decisions, with plain values for connections and waiters: who gets a
/// connection, who waits and until when, where a returned one goes, when the timer runs.
struct PGPoolStateTests {
    typealias State = PGPoolState<String, String>
    let start = ContinuousClock.now

    @Test func idleConnectionsGoFirstThenCallersWaitAndAreServedInOrder() {
        var state = State(connections: ["a", "b"], now: start)
        guard case .connection("b", let first, idle: 1) = state.checkOut(), case .connection("a", let second, idle: 0) = state.checkOut() else {
            Issue.record("the idle connections were not handed out")
            return
        }
        #expect(first != second)
        guard case .wait(let third) = state.checkOut(), case .wait(let fourth) = state.checkOut() else {
            Issue.record("a caller with no idle connection does not wait")
            return
        }
        #expect(state.wait(third, "third", until: start + .seconds(10)) == .waits(startTimer: true))
        #expect(state.wait(fourth, "fourth", until: start + .seconds(11)) == .waits(startTimer: false), "one timer for all")
        #expect(state.checkIn("b", now: start) == .handTo("third"))
        #expect(state.checkIn("a", now: start) == .handTo("fourth"))
        #expect(state.checkIn("b", now: start) == .idle(1))
    }

    @Test func aConnectionBackBeforeTheWaitBeginsIsTakenWithoutWaiting() {
        var state = State(connections: ["a"], now: start)
        _ = state.checkOut()
        guard case .wait(let id) = state.checkOut() else { Issue.record("no wait"); return }
        #expect(state.checkIn("a", now: start) == .idle(1))
        #expect(state.wait(id, "w", until: start + .seconds(10)) == .connection("a"))
    }

    @Test func waitsEndAtTheirDeadlineAndTheTimerStopsWhenNobodyWaits() {
        var state = State(connections: [], now: start)
        for (index, name) in ["w1", "w2", "w3"].enumerated() {
            guard case .wait(let id) = state.checkOut() else { Issue.record("no wait"); return }
            _ = state.wait(id, name, until: start + .seconds(10 + index))
        }
        let early = state.expire(now: start + .seconds(5))
        #expect(early.expired.isEmpty && early.next == start + .seconds(10))
        let some = state.expire(now: start + .seconds(11))
        #expect(some.expired == ["w1", "w2"] && some.next == start + .seconds(12))
        let rest = state.expire(now: start + .seconds(12))
        #expect(rest.expired == ["w3"] && rest.next == nil, "nobody waits: the timer stops")
        guard case .wait(let id) = state.checkOut() else { Issue.record("no wait"); return }
        #expect(state.wait(id, "w4", until: start + .seconds(20)) == .waits(startTimer: true), "a new wait starts it again")
    }

    @Test func aWaiterServedBeforeItsDeadlineIsNotTimedOut() {
        var state = State(connections: ["a"], now: start)
        _ = state.checkOut()
        guard case .wait(let id) = state.checkOut() else { Issue.record("no wait"); return }
        _ = state.wait(id, "w", until: start + .seconds(10))
        #expect(state.checkIn("a", now: start + .seconds(1)) == .handTo("w"))
        let woken = state.expire(now: start + .seconds(10))
        #expect(woken.expired.isEmpty && woken.next == nil)
    }

    @Test func aCancelledWaiterIsToldOnceAndOneCancelledBeforeWaitingIsRefused() {
        var state = State(connections: [], now: start)
        guard case .wait(let waiting) = state.checkOut(), case .wait(let early) = state.checkOut() else {
            Issue.record("no wait")
            return
        }
        _ = state.wait(waiting, "waiting", until: start + .seconds(10))
        #expect(state.cancel(waiting) == "waiting")
        #expect(state.cancel(early) == nil, "not waiting yet: remembered")
        #expect(state.wait(early, "early", until: start + .seconds(10)) == .cancelled)
        #expect(state.expire(now: start + .seconds(10)).expired.isEmpty, "a cancelled waiter is not timed out too")
    }

    @Test func aCancelAfterTheWaitEndedRefusesNothingLater() {
        var state = State(connections: [], now: start)
        guard case .wait(let id) = state.checkOut() else { Issue.record("no wait"); return }
        _ = state.wait(id, "w", until: start + .seconds(10))
        #expect(state.checkIn("a", now: start) == .handTo("w"))
        #expect(state.cancel(id) == nil)
        state.ended(id)
        guard case .wait(let next) = state.checkOut() else { Issue.record("no wait"); return }
        #expect(state.wait(next, "next", until: start + .seconds(10)) == .waits(startTimer: false))
    }

    @Test func healthChecksTakeOnlyConnectionsIdleLongEnough() {
        var state = State(connections: ["old"], now: start)
        #expect(state.checkIn("new", now: start + .seconds(25)) == .idle(2))
        let checkedBefore = start + .seconds(30) - .seconds(30)
        #expect(state.takeIdle(since: checkedBefore) == "old")
        #expect(state.takeIdle(since: checkedBefore) == nil, "the other came back within the interval")
        #expect(state.checkIn("old", now: start + .seconds(30)) == .idle(2))
        #expect(state.takeIdle(since: checkedBefore) == nil, "one checked this round is not taken again")
    }

    @Test func closingTellsTheWaitersAndClosesIdleAndReturnedConnections() {
        var state = State(connections: ["a"], now: start)
        _ = state.checkOut()
        guard case .wait(let id) = state.checkOut() else { Issue.record("no wait"); return }
        _ = state.wait(id, "w", until: start + .seconds(10))
        let closed = state.close()
        #expect(closed.waiters == ["w"] && closed.idle.isEmpty)
        #expect(state.checkIn("a", now: start) == .close, "what comes back after is closed")
        guard case .closed = state.checkOut() else { Issue.record("a closed pool handed out a connection"); return }

        var idle = State(connections: ["a", "b"], now: start)
        #expect(idle.close().idle == ["a", "b"])
    }
}
