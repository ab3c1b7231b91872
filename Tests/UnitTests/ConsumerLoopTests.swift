import AMQPBridge
import Testing

/// The consumer thread's decisions — connect, back off, settle, cancel, stop — without a
/// broker.
struct ConsumerLoopTests {
    @Test func connectsFirstAndBacksOffUntilTheBrokerAnswers() {
        var loop = ConsumerLoop()
        #expect(loop.turn(phase: .consuming, settlements: [], now: 0) == [.connect(generation: 1)])
        #expect(loop.connectFailed(now: 0) == 0.25)
        #expect(loop.turn(phase: .consuming, settlements: [], now: 0.25) == [.connect(generation: 2)])
        #expect(loop.connectFailed(now: 0.25) == 0.5)
        for step in 0..<10 { loop.connectFailed(now: Double(step)) }
        #expect(loop.connectFailed(now: 20) == 10, "the wait is capped")
        #expect(loop.turn(phase: .consuming, settlements: [], now: 30) == [.connect(generation: 3)])
        loop.connected()
        #expect(loop.turn(phase: .consuming, settlements: [], now: 30) == [.receive])
        loop.connectionLost()
        #expect(loop.turn(phase: .consuming, settlements: [], now: 31) == [.connect(generation: 4)])
        #expect(loop.connectFailed(now: 31) == 0.25, "a connection that worked resets the backoff")
    }

    @Test func wakeUpsDuringTheWaitNeitherConnectNorGrowTheBackoff() {
        var loop = ConsumerLoop()
        _ = loop.turn(phase: .consuming, settlements: [], now: 100)
        #expect(loop.connectFailed(now: 100) == 0.25)
        // A settlement of the lost connection wakes the thread early, many times over.
        let stale = ConsumerLoop.Settlement.ack(4, generation: 1)
        for t in stride(from: 100.0, to: 100.25, by: 0.01) {
            guard case .wait(let seconds) = loop.turn(phase: .consuming, settlements: [stale], now: t).first else {
                Issue.record("a wake-up at \(t) tried to connect before the deadline")
                return
            }
            #expect(abs(seconds - (100.25 - t)) < 1e-9)
        }
        #expect(loop.turn(phase: .consuming, settlements: [], now: 100.25) == [.connect(generation: 2)])
        #expect(loop.connectFailed(now: 100.25) == 0.5, "only the real attempt grew the wait")
    }

    @Test func settlementsOfALostConnectionAreDropped() {
        var loop = ConsumerLoop()
        _ = loop.turn(phase: .consuming, settlements: [], now: 0)
        loop.connected()
        loop.connectionLost()
        _ = loop.turn(phase: .consuming, settlements: [], now: 0)
        loop.connected()
        let old = ConsumerLoop.Settlement.ack(7, generation: 1)
        let live = ConsumerLoop.Settlement.reject(3, generation: 2, requeue: true)
        #expect(loop.turn(phase: .consuming, settlements: [old, live], now: 0) == [.settle([live]), .receive])
        #expect(loop.turn(phase: .consuming, settlements: [old], now: 0) == [.receive])
    }

    @Test func drainingCancelsOnceThenHandsDeliveriesBackButStillSettles() {
        var loop = ConsumerLoop()
        _ = loop.turn(phase: .consuming, settlements: [], now: 0)
        loop.connected()
        #expect(loop.received() == .handOn)
        let ack = ConsumerLoop.Settlement.ack(1, generation: 1)
        #expect(loop.turn(phase: .draining, settlements: [ack], now: 0) == [.settle([ack]), .cancel, .receive])
        #expect(loop.received() == .handBack)
        #expect(loop.turn(phase: .draining, settlements: [], now: 0) == [.receive])
    }

    @Test func closingSettlesWhatIsPendingThenStops() {
        var loop = ConsumerLoop()
        _ = loop.turn(phase: .consuming, settlements: [], now: 0)
        loop.connected()
        let ack = ConsumerLoop.Settlement.ack(9, generation: 1)
        #expect(loop.turn(phase: .closing, settlements: [ack], now: 0) == [.settle([ack]), .stop])
        loop.connectionLost()
        #expect(loop.turn(phase: .draining, settlements: [], now: 0) == [.stop], "no reconnect once draining")
        #expect(loop.turn(phase: .closing, settlements: [ack], now: 0) == [.stop])
        #expect(loop.turn(phase: .closing, settlements: [], now: 0) == [.stop], "nor while waiting to retry")
    }
}
