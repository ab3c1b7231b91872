import AMQPBridge
import Testing

/// When deliveries become batches — the worker's group commit — without a broker.
struct BatchDispatchTests {
    @Test func lightLoadStartsEachArrivalAtOnceAlone() {
        var dispatch = BatchDispatch<Int>(maxBatch: 10, slots: 2)
        #expect(dispatch.arrived(1) == [[1]])
        #expect(dispatch.arrived(2) == [[2]])
        #expect(dispatch.finished() == [])
        #expect(dispatch.arrived(3) == [[3]])
    }

    @Test func whatArrivesWhileEverySlotIsBusyLeavesTogetherWhenOneFrees() {
        var dispatch = BatchDispatch<Int>(maxBatch: 10, slots: 1)
        #expect(dispatch.arrived(1) == [[1]])
        for item in 2...6 { #expect(dispatch.arrived(item) == []) }
        #expect(dispatch.waitingItems == [2, 3, 4, 5, 6])
        #expect(dispatch.finished() == [[2, 3, 4, 5, 6]])
        #expect(dispatch.running == 1 && dispatch.waitingItems.isEmpty)
    }

    @Test func batchesAreBoundedAndKeepArrivalOrder() {
        var dispatch = BatchDispatch<Int>(maxBatch: 3, slots: 2)
        #expect(dispatch.arrived(0) == [[0]])
        #expect(dispatch.arrived(1) == [[1]])
        for item in 2...9 { #expect(dispatch.arrived(item) == []) }
        #expect(dispatch.finished() == [[2, 3, 4]])
        #expect(dispatch.finished() == [[5, 6, 7]])
        #expect(dispatch.finished() == [[8, 9]])
        #expect(dispatch.finished() == [])
        #expect(dispatch.finished() == [])
        #expect(dispatch.running == 0)
    }

    @Test func batchesAreBoundedInWeightAndAHeavyItemGoesAlone() {
        var dispatch = BatchDispatch<Int>(maxBatch: 10, maxWeight: 100, slots: 1)
        #expect(dispatch.arrived(0, weight: 1) == [[0]])
        for (item, weight) in [(1, 40), (2, 40), (3, 40), (4, 500), (5, 10), (6, 0)] {
            #expect(dispatch.arrived(item, weight: weight) == [])
        }
        #expect(dispatch.finished() == [[1, 2]], "a third 40 would pass 100")
        #expect(dispatch.finished() == [[3]], "the 500 does not fit beside it")
        #expect(dispatch.finished() == [[4]], "heavier than the bound, alone")
        #expect(dispatch.finished() == [[5, 6]], "a weight below 1 counts as 1")
        #expect(dispatch.finished() == [])
    }

    @Test func doneOnlyOnceEndedAndEverythingFinished() {
        var dispatch = BatchDispatch<Int>(maxBatch: 2, slots: 1)
        _ = dispatch.arrived(1)
        _ = dispatch.arrived(2)
        dispatch.end()
        #expect(!dispatch.isDone)
        #expect(dispatch.finished() == [[2]])
        #expect(!dispatch.isDone)
        #expect(dispatch.finished() == [])
        #expect(dispatch.isDone)
    }
}
