import SyncModels
import Testing
import TestSupport

/// Everyone converges: the final state depends only on the set of ops applied — never on order, on how
/// ops are grouped into jobs, or on duplicates.
@Suite("Convergence property")
struct ConvergencePropertyTests {
    static func randomOps(count: Int, using rng: inout SplitMix64) -> [Op] {
        let ids = ["r1", "r2", "r3"]
        let fields = ["a", "b", "c", "d"]
        let values: [JSONValue] = [.int(1), .int(2), .string("x"), .bool(true), .null, .array([.int(1)])]
        return (0..<count).map { n in
            let id = ids.randomElement(using: &rng)!
            // A narrow clock range makes equal HLCs (ties broken by op_id) common.
            let time = Int.random(in: 0..<12, using: &rng)
            var data: [String: JSONValue] = [:]
            for field in fields where Bool.random(using: &rng) {
                data[field] = values.randomElement(using: &rng)!
            }
            switch Int.random(in: 0..<14, using: &rng) {
            case 0..<3: return upsert(n, data, at: time, id: id)
            case 3..<7: return patch(n, data.isEmpty ? ["a": 1] : data, at: time, id: id)
            // One public id per record: contested ids are the documented order-dependent case.
            case 7:
                return publish(
                    n, "pub-\(id.lowercased())", at: time, id: id, canFork: Bool.random(using: &rng),
                    listed: [true, false, nil].randomElement(using: &rng)!)
            case 8: return unpublish(n, at: time, id: id)
            // Forks of other users' records that do not change meanwhile (a fork copies what
            // its source holds when applied: order-dependent only through the source).
            case 9: return fork(n, "fixed-guide", at: time, id: id)
            case 10: return fork(n, "locked-guide", at: time, id: id)
            default: return delete(n, at: time, id: id)
            }
        }
    }

    static let sources: [String: ForkSource] = [
        "fixed-guide": foreignSource(["a": "guide", "b": .array([1, 2])]),
        "locked-guide": foreignSource(["a": "locked"], canFork: false, id: "locked"),
    ]

    static func finalStates(of ops: [Op], order: [Int], jobSizes: inout SplitMix64) -> [RecordKey: RecordState] {
        var replica = Replica()
        replica.foreignSources = sources
        var index = 0
        while index < order.count {
            let size = Int.random(in: 1...5, using: &jobSizes)
            let job = order[index..<min(index + size, order.count)].map { ops[$0] }
            replica.apply(job)
            index += size
        }
        return replica.records.mapValues(\.state)
    }

    @Test(arguments: 0..<200)
    func anyOrderWithDuplicatesGivesSameState(seed: Int) {
        var rng = SplitMix64(state: UInt64(seed) &* 7919)
        let ops = Self.randomOps(count: Int.random(in: 1...25, using: &rng), using: &rng)
        Self.expectOneState(of: ops, orders: 8, duplicates: 0...5, seed: seed, using: &rng)
    }

    /// Applies `ops` in `orders` random orders, each with some of them delivered again at
    /// random later positions and cut into random jobs: every order must give one state.
    static func expectOneState(
        of ops: [Op], orders: Int, duplicates: ClosedRange<Int>, seed: Int, using rng: inout SplitMix64
    ) {
        var reference: [RecordKey: RecordState]?
        for _ in 0..<orders {
            var order = Array(ops.indices).shuffled(using: &rng)
            for _ in 0..<Int.random(in: duplicates, using: &rng) {
                let duplicate = ops.indices.randomElement(using: &rng)!
                order.insert(duplicate, at: Int.random(in: 0...order.count, using: &rng))
            }
            let states = finalStates(of: ops, order: order, jobSizes: &rng)
            if let reference {
                #expect(states == reference, "seed \(seed): order \(order) diverged")
            } else {
                reference = states
            }
        }
    }

    /// Field clocks are stored without those equal to the newest write, and restored from
    /// it: exactly, for every state the merge can reach, since every field holding a value
    /// has a clock.
    @Test(arguments: 0..<100)
    func storedFieldClocksRestoreExactly(seed: Int) {
        var rng = SplitMix64(state: UInt64(seed) &* 104_729)
        let ops = Self.randomOps(count: Int.random(in: 1...25, using: &rng), using: &rng)
        let states = Self.finalStates(of: ops, order: Array(ops.indices).shuffled(using: &rng), jobSizes: &rng)
        for (key, state) in states {
            #expect(state.fields.keys.allSatisfy { state.fieldClocks[$0] != nil }, "seed \(seed) \(key): a value without a clock")
            let restored = RecordState.restoringFieldClocks(
                state.storedFieldClocks, fields: state.fields, writeClock: state.writeClock)
            #expect(restored == state.fieldClocks, "seed \(seed) \(key)")
            // Rows stored with every clock (before the compact form) read the same.
            #expect(RecordState.restoringFieldClocks(state.fieldClocks, fields: state.fields, writeClock: state.writeClock)
                == state.fieldClocks)
        }
    }

    @Test func anUpsertStoresNoFieldClock() {
        var state = RecordState()
        let stamp = Stamp(hlc: "0001-00000-n", opID: "00000000-0000-0000-0000-000000000001")
        state.upsert(["a": 1, "b": "x"], at: stamp)
        #expect(state.storedFieldClocks.isEmpty)
        state.patch(["b": .null], at: Stamp(hlc: "0002-00000-n", opID: "00000000-0000-0000-0000-000000000002"))
        #expect(state.storedFieldClocks.keys.sorted() == ["a", "b"], "a older field and a removed one keep their clocks")
    }

    @Test func visibleDataMatchesNaiveReplayInStampOrder() {
        // Cross-check against the obvious model: apply ops sorted by (hlc, op_id), one by one.
        var rng = SplitMix64(state: 42)
        for _ in 0..<200 {
            let ops = Self.randomOps(count: 15, using: &rng)
            var replica = Replica()
            replica.foreignSources = Self.sources
            replica.apply(ops.shuffled(using: &rng))
            var model: [String: (deleted: Bool, fields: [String: JSONValue])] = [:]
            for op in ops.sorted(by: { $0.stamp < $1.stamp }) {
                var record = model[op.id] ?? (deleted: false, fields: [:])
                switch op.type {
                case .upsert: record = (false, op.data ?? [:])
                case .patch:
                    record.deleted = false
                    for (field, value) in op.data ?? [:] { record.fields[field] = value.isNull ? nil : value }
                case .delete: record = (true, [:])
                case .fork where op.publicID == "fixed-guide": record = (false, ["a": "guide", "b": .array([1, 2])])
                default: break
                }
                model[op.id] = record
            }
            for (id, expected) in model {
                let state = replica.state(id)
                #expect(state?.deleted == expected.deleted)
                #expect(state?.visibleData == (expected.deleted ? nil : expected.fields))
            }
        }
    }
}
