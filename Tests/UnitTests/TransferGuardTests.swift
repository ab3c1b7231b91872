import HTTPSupport
import Testing

/// When a connection is too slow to keep, without a socket: downloads the client stops
/// reading, uploads that trickle, and uploads the server itself is slow to read.
struct TransferGuardTests {
    let limits = TransferGuard.Limits(stallTimeout: 30, minimumRate: 1024)

    @Test func aResponseHeldUpForTheStallTimeoutIsClosed() {
        var rules = TransferGuard(limits: limits)
        #expect(!rules.isWatching)
        rules.writability(false, at: 100)
        #expect(rules.isWatching)
        #expect(rules.verdict(at: 129) == .keep)
        rules.writability(false, at: 120)  // still unwritable: the clock is not restarted
        #expect(rules.verdict(at: 130) == .closeStalledResponse)
    }

    @Test func aResponseTheClientKeepsDrainingIsKept() {
        var rules = TransferGuard(limits: limits)
        for second in stride(from: 0.0, to: 300, by: 20) {
            rules.writability(false, at: second)
            #expect(rules.verdict(at: second + 19) == .keep)
            rules.writability(true, at: second + 19.5)
        }
        #expect(!rules.isWatching)
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
