import AMQPBridge
import Testing

/// The consumer thread's decisions — connect, back off, settle, cancel, stop — without a
/// broker.
struct ConsumerLoopTests {
    @Test func connectsFirstAndBacksOffUntilTheBrokerAnswers() {
        var loop = ConsumerLoop()
        #expect(loop.turn(phase: .consuming, settlements: []) == [.connect(generation: 1)])
        #expect(loop.connectFailed() == 0.25)
        #expect(loop.turn(phase: .consuming, settlements: []) == [.connect(generation: 2)])
        #expect(loop.connectFailed() == 0.5)
        for _ in 0..<10 { _ = loop.connectFailed() }
        #expect(loop.connectFailed() == 10, "the wait is capped")
        loop.connected()
        #expect(loop.turn(phase: .consuming, settlements: []) == [.receive])
        loop.connectionLost()
        #expect(loop.turn(phase: .consuming, settlements: []) == [.connect(generation: 3)])
        #expect(loop.connectFailed() == 0.25, "a connection that worked resets the backoff")
    }

    @Test func settlementsOfALostConnectionAreDropped() {
        var loop = ConsumerLoop()
        _ = loop.turn(phase: .consuming, settlements: [])
        loop.connected()
        loop.connectionLost()
        _ = loop.turn(phase: .consuming, settlements: [])
        loop.connected()
        let old = ConsumerLoop.Settlement.ack(7, generation: 1)
        let live = ConsumerLoop.Settlement.reject(3, generation: 2, requeue: true)
        #expect(loop.turn(phase: .consuming, settlements: [old, live]) == [.settle([live]), .receive])
        #expect(loop.turn(phase: .consuming, settlements: [old]) == [.receive])
    }

    @Test func drainingCancelsOnceThenHandsDeliveriesBackButStillSettles() {
        var loop = ConsumerLoop()
        _ = loop.turn(phase: .consuming, settlements: [])
        loop.connected()
        #expect(loop.received() == .handOn)
        let ack = ConsumerLoop.Settlement.ack(1, generation: 1)
        #expect(loop.turn(phase: .draining, settlements: [ack]) == [.settle([ack]), .cancel, .receive])
        #expect(loop.received() == .handBack)
        #expect(loop.turn(phase: .draining, settlements: []) == [.receive])
    }

    @Test func closingSettlesWhatIsPendingThenStops() {
        var loop = ConsumerLoop()
        _ = loop.turn(phase: .consuming, settlements: [])
        loop.connected()
        let ack = ConsumerLoop.Settlement.ack(9, generation: 1)
        #expect(loop.turn(phase: .closing, settlements: [ack]) == [.settle([ack]), .stop])
        loop.connectionLost()
        #expect(loop.turn(phase: .draining, settlements: []) == [.stop], "no reconnect once draining")
        #expect(loop.turn(phase: .closing, settlements: [ack]) == [.stop])
    }
}
