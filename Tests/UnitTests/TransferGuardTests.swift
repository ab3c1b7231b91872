import HTTPSupport
import Testing

/// When a connection is too slow to keep, without a socket: downloads the client stops
/// reading, uploads that trickle, and uploads the server itself is slow to read.
struct TransferGuardTests {
    let limits = TransferGuard.Limits(stallTimeout: 30, minimumRate: 1024)

    @Test func aResponsePartTheSocketDoesNotTakeForTheStallTimeoutIsClosed() {
        var rules = TransferGuard(limits: limits)
        #expect(!rules.isWatching)
        rules.responseWriteStarted(at: 100)
        #expect(rules.isWatching && rules.responseWaiting)
        #expect(rules.verdict(at: 129) == .keep)
        #expect(rules.verdict(at: 130) == .closeStalledResponse)
    }

    /// A stalled reader waiting on a small piece: one part waits, the channel stays
    /// writable, and nothing else is ever written. It is closed all the same.
    @Test func aSmallPieceWaitingIsAsStalledAsABigOne() {
        var rules = TransferGuard(limits: limits)
        rules.responseWriteStarted(at: 0)
        rules.responseWriteFinished(at: 0)  // the head, taken at once
        rules.responseWriteStarted(at: 0.5)  // a 4 KiB piece the kernel has no room for
        #expect(rules.verdict(at: 30) == .keep)
        #expect(rules.verdict(at: 30.5) == .closeStalledResponse)
    }

    @Test func aResponseTheClientKeepsTakingIsKept() {
        var rules = TransferGuard(limits: limits)
        rules.responseWriteStarted(at: 0)
        // Each part is taken after 20 s, and the next handed over meanwhile.
        for second in stride(from: 20.0, to: 300, by: 20) {
            rules.responseWriteStarted(at: second - 1)
            #expect(rules.verdict(at: second - 0.5) == .keep)
            rules.responseWriteFinished(at: second)
        }
        rules.responseWriteFinished(at: 300)
        #expect(!rules.isWatching && !rules.responseWaiting)
    }

    @Test func aTricklingBodyIsClosedAfterAWindowOfWaiting() {
        var rules = TransferGuard(limits: limits)
        rules.requestHead()
        // One byte every ten seconds, a read always asked for.
        var now = 0.0
        var verdicts: [TransferGuard.Verdict] = []
        while now < 40 {
            rules.readRequested(at: now)
            now += 10
            rules.requestBody(bytes: 1, at: now)
            verdicts.append(rules.verdict(at: now))
        }
        #expect(verdicts == [.keep, .keep, .closeSlowRequestBody, .closeSlowRequestBody])
    }

    @Test func aBodyAtTheMinimumRateIsKeptWindowAfterWindow() {
        var rules = TransferGuard(limits: limits)
        rules.requestHead()
        for second in 0..<300 {
            rules.readRequested(at: Double(second))
            rules.requestBody(bytes: 1100, at: Double(second) + 1)
            #expect(rules.verdict(at: Double(second) + 1) == .keep, "second \(second)")
        }
        rules.requestEnd()
        #expect(!rules.isWatching)
    }

    @Test func timeTheServerSpendsNotReadingDoesNotCount() {
        var rules = TransferGuard(limits: limits)
        rules.requestHead()
        rules.readRequested(at: 0)
        rules.requestBody(bytes: 1 << 20, at: 0.1)
        // The store is slow: no read is asked for during a minute.
        #expect(rules.verdict(at: 60) == .keep)
        rules.readRequested(at: 60)
        rules.requestBody(bytes: 64 << 10, at: 60.5)
        #expect(rules.verdict(at: 61) == .keep)
    }

    @Test func aBodySilentAfterItsFirstBytesIsClosed() {
        var rules = TransferGuard(limits: limits)
        rules.requestHead()
        rules.readRequested(at: 0)
        rules.requestBody(bytes: 10, at: 1)
        rules.readRequested(at: 1)
        #expect(rules.verdict(at: 29) == .keep)
        #expect(rules.verdict(at: 31) == .closeSlowRequestBody)
    }

    @Test func aFinishedRequestIsNotWatched() {
        var rules = TransferGuard(limits: limits)
        rules.requestHead()
        rules.readRequested(at: 0)
        rules.requestEnd()
        rules.readRequested(at: 1)  // waiting for the next request is the idle timeout's
        #expect(!rules.isWatching)
        #expect(rules.verdict(at: 1_000) == .keep)
    }
}
