import SyncModels
import Testing
import TestSupport

@Suite("Counters and sets")
struct CounterAndSetTests {
    @Test func incrementsAddUpOnTheLastWholeWriteAndARetryCountsOnce() {
        var replica = Replica()
        replica.apply([upsert(1, ["title": "flour", "stock": 10], at: 10)])
        let results = replica.apply([increment(2, "stock", by: -1, at: 20), increment(3, "stock", by: 5, at: 21)])
        #expect(results.map(\.status) == [.applied, .applied])
        let again = replica.apply([increment(2, "stock", by: -1, at: 20)])
        #expect(again.map(\.status) == [.duplicate])
        #expect(replica.state()?.visibleData == ["title": "flour", "stock": 14])
    }

    @Test func anIncrementOnAMissingFieldOrRecordStartsFromZero() {
        var replica = Replica()
        replica.apply([increment(1, "likes", by: 1, at: 10, id: "new")])
        replica.apply([upsert(2, ["title": "a"], at: 5), increment(3, "views", by: 2.5, at: 11)])
        #expect(replica.state("new")?.visibleData == ["likes": 1])
        #expect(replica.state()?.visibleData == ["title": "a", "views": 2.5])
    }

    @Test func aWholeWriteOverrulesOnlyTheIncrementsOlderThanIt() {
        // The newer write's value plus what came after it, whichever arrives first.
        let ops = [increment(1, "n", by: 1, at: 10), patch(2, ["n": 100], at: 15), increment(3, "n", by: 2, at: 20)]
        for order in [[0, 1, 2], [2, 1, 0], [1, 2, 0], [0, 2, 1]] {
            var replica = Replica()
            for index in order { replica.apply([ops[index]]) }
            #expect(replica.state()?.visibleData == ["n": 102], "order \(order)")
            #expect(replica.state()?.merged["n"] != nil, "the increment newer than the write is still kept")
        }
    }

    @Test func anUpsertWithoutTheFieldOrADeleteResetsItToZeroForLaterIncrements() {
        var replica = Replica()
        replica.apply([upsert(1, ["n": 5], at: 10), increment(2, "n", by: 1, at: 30)])
        replica.apply([upsert(3, ["title": "x"], at: 20)])
        #expect(replica.state()?.visibleData == ["title": "x", "n": 1])
        replica.apply([delete(4, at: 25)])
        #expect(replica.state()?.deleted == false, "a write after the delete resurrects the record with just that field")
        #expect(replica.state()?.visibleData == ["n": 1])
        replica.apply([delete(5, at: 40)])
        #expect(replica.state()?.deleted == true)
        #expect(replica.state()?.merged.isEmpty == true, "a delete newer than every increment settles the field")
    }

    @Test func anOlderIncrementIsSupersededByTheWholeWrite() {
        var replica = Replica()
        replica.apply([patch(1, ["n": 7], at: 20)])
        let results = replica.apply([increment(2, "n", by: 1, at: 10)])
        #expect(results.map(\.status) == [.superseded])
        #expect(replica.state()?.visibleData == ["n": 7])
        #expect(replica.state()?.merged.isEmpty == true)
    }

    @Test func anIncrementOnTextOrASetAndAnAddOnANumberAreRefused() {
        var replica = Replica()
        replica.apply([upsert(1, ["title": "a", "n": 1, "tags": ["x"]], at: 10)])
        let results = replica.apply([
            increment(2, "title", by: 1, at: 20), increment(3, "tags", by: 1, at: 21), add(4, "n", ["y"], at: 22),
            add(5, "title", ["y"], at: 23),
        ])
        #expect(results.map(\.status) == [.rejected, .rejected, .rejected, .rejected])
        #expect(results.map(\.reason) == ["not_a_number", "not_a_number", "not_a_set", "not_a_set"])
        replica.apply([increment(6, "n", by: 1, at: 30)])
        let mixed = replica.apply([add(7, "n", ["y"], at: 31), remove(8, "n", ["y"], at: 32)])
        #expect(mixed.map(\.reason) == ["not_a_set", "not_a_set"], "a counter is no set")
        #expect(replica.state()?.visibleData == ["title": "a", "n": 2, "tags": ["x"]])
        // Refused ops are not remembered: the same op id may come again, fixed.
        #expect(replica.apply([increment(2, "n", by: 1, at: 33)]).map(\.status) == [.applied])
    }

    @Test func integersStayExactAndFractionsAddInStampOrder() {
        var replica = Replica()
        replica.apply([increment(1, "n", by: .int(Int64.max - 1), at: 10), increment(2, "n", by: 1, at: 11)])
        #expect(replica.state()?.fields["n"] == .int(Int64.max))
        replica.apply([increment(3, "n", by: 1, at: 12)])
        #expect(replica.state()?.fields["n"] == .double(Double(Int64.max) + 1), "an overflow becomes a double")
        var fractions = Replica()
        fractions.apply([increment(4, "f", by: 0.1, at: 10), increment(5, "f", by: 0.2, at: 11), increment(6, "f", by: 0.3, at: 12)])
        var reversed = Replica()
        reversed.apply([increment(6, "f", by: 0.3, at: 12), increment(5, "f", by: 0.2, at: 11), increment(4, "f", by: 0.1, at: 10)])
        #expect(fractions.state()?.fields["f"] == reversed.state()?.fields["f"])
    }

    @Test func aHotCounterKeepsAFewIncrementsAndFoldsTheRest() {
        var replica = Replica()
        replica.apply([upsert(1, ["n": 0], at: 1)])
        for n in 2...1001 { replica.apply([increment(n, "n", by: 1, at: n, node: "dev-\(n % 20)")]) }
        let state = replica.state()!
        #expect(state.fields["n"] == 1000)
        guard case .counter(let counter)? = state.merged["n"]?.kind else {
            Issue.record("n is not a counter")
            return
        }
        #expect(counter.increments.count == MergedField.keptIncrements)
        #expect(counter.folded?.sum == .int(Int64(1000 - MergedField.keptIncrements)))
        // A late increment still counts; a late whole write newer than the kept ones is exact.
        replica.apply([increment(5000, "n", by: 1, at: 500)])
        #expect(replica.state()?.fields["n"] == 1001)
        replica.apply([patch(5001, ["n": 0], at: 995)])
        #expect(replica.state()?.fields["n"] == 7, "the increments at 995…1001 (995's clock names a later node than the patch's)")
    }

    @Test func addWinsOverAConcurrentRemoveAndARemoveTakesOutOlderAdds() {
        var replica = Replica()
        replica.apply([upsert(1, ["tags": ["a", "b"]], at: 10)])
        replica.apply([add(2, "tags", ["c", "d"], at: 20), remove(3, "tags", ["a", "c"], at: 25), add(4, "tags", ["a"], at: 30)])
        #expect(replica.state()?.visibleData == ["tags": ["b", "d", "a"]])
        // Order never matters.
        var reversed = Replica()
        reversed.apply([add(4, "tags", ["a"], at: 30), remove(3, "tags", ["a", "c"], at: 25), add(2, "tags", ["c", "d"], at: 20)])
        reversed.apply([upsert(1, ["tags": ["a", "b"]], at: 10)])
        #expect(reversed.state()?.visibleData == replica.state()?.visibleData)
    }

    @Test func setElementsAreAnyJSONValueComparedByContent() {
        var replica = Replica()
        replica.apply([add(1, "crew", [["name": "Ann", "role": "skipper"], 1, 1.0, .null], at: 10)])
        replica.apply([remove(2, "crew", [["role": "skipper", "name": "Ann"]], at: 20)])
        #expect(replica.state()?.visibleData == ["crew": [1.0, .null]], "1 and 1.0 are one element; key order does not matter")
    }

    @Test func aRemoveOnAnAbsentFieldLeavesItAbsent() {
        var replica = Replica()
        replica.apply([upsert(1, ["title": "a"], at: 10), remove(2, "tags", ["x"], at: 20)])
        #expect(replica.state()?.visibleData == ["title": "a"])
    }

    // MARK: - Every order converges

    /// Ops on counters (`n`), sets (`tags`) and a plain field, mixed with upserts, patches
    /// and deletes that write each field as its kind (a field used as two kinds is the one
    /// order-dependent case, refused by the server).
    static func randomOps(count: Int, using rng: inout SplitMix64) -> [Op] {
        let ids = ["r1", "r2"]
        let elements: [JSONValue] = ["a", "b", "c", 1, ["k": "v"]]
        func someElements() -> [JSONValue] {
            (0..<Int.random(in: 1...3, using: &rng)).map { _ in elements.randomElement(using: &rng)! }
        }
        func data(allowingNull: Bool) -> [String: JSONValue] {
            var data: [String: JSONValue] = [:]
            if Bool.random(using: &rng) { data["title"] = ["x", "y"].randomElement(using: &rng)! }
            if Int.random(in: 0..<3, using: &rng) == 0 { data["n"] = allowingNull && Bool.random(using: &rng) ? .null : .int(Int64.random(in: -5...5, using: &rng)) }
            if Int.random(in: 0..<3, using: &rng) == 0 { data["tags"] = allowingNull && Bool.random(using: &rng) ? .null : .array(someElements()) }
            return data
        }
        return (0..<count).map { n in
            let id = ids.randomElement(using: &rng)!
            let time = Int.random(in: 0..<16, using: &rng)
            switch Int.random(in: 0..<12, using: &rng) {
            case 0: return upsert(n, data(allowingNull: false), at: time, id: id)
            case 1, 2:
                let changes = data(allowingNull: true)
                return patch(n, changes.isEmpty ? ["title": "z"] : changes, at: time, id: id)
            case 3: return delete(n, at: time, id: id)
            case 4, 5, 6:
                let by: JSONValue = Bool.random(using: &rng) ? .int(Int64.random(in: -3...3, using: &rng)) : .double(0.5)
                return increment(n, "n", by: by, at: time, id: id)
            case 7, 8, 9: return add(n, "tags", someElements(), at: time, id: id)
            default: return remove(n, "tags", someElements(), at: time, id: id)
            }
        }
    }

    @Test(arguments: 0..<300)
    func anyOrderWithDuplicatesGivesTheSameState(seed: Int) {
        var rng = SplitMix64(state: UInt64(seed) &* 6_700_417)
        let ops = Self.randomOps(count: Int.random(in: 1...30, using: &rng), using: &rng)
        ConvergencePropertyTests.expectOneState(of: ops, orders: 6, duplicates: 0...4, seed: seed, using: &rng)
    }

    /// The merge against the plain reading of the rules: ops replayed one by one in stamp
    /// order, a counter adding to what the field holds, an add moving its elements to the
    /// end, a remove taking them out.
    @Test(arguments: 0..<200)
    func visibleDataMatchesAReplayInStampOrder(seed: Int) {
        var rng = SplitMix64(state: UInt64(seed) &* 15_485_863)
        let ops = Self.randomOps(count: 20, using: &rng)
        var replica = Replica()
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
            case .increment:
                record.deleted = false
                let start: JSONValue = record.fields["n"].flatMap { $0.isNull ? nil : $0 } ?? 0
                record.fields["n"] = MergedField.sum(start, op.by!)
            case .add, .remove:
                record.deleted = false
                let existing = record.fields["tags"]
                guard op.type == .add || existing?.arrayValue != nil else { break }
                var items = existing?.arrayValue ?? []
                for value in op.values! {
                    items.removeAll { MergedField.elementKey($0) == MergedField.elementKey(value) }
                    if op.type == .add { items.append(value) }
                }
                record.fields["tags"] = .array(items)
            default: break
            }
            model[op.id] = record
        }
        for (id, expected) in model {
            let state = replica.state(id)
            #expect(state?.deleted == expected.deleted, "seed \(seed) \(id)")
            #expect(state?.visibleData == (expected.deleted ? nil : expected.fields), "seed \(seed) \(id)")
        }
    }

    /// Purge settles what is older than its horizon: readers see the same, and every op newer
    /// than the horizon still merges as it would have.
    @Test(arguments: 0..<200)
    func settlingOldOpsChangesNothingForNewerOnes(seed: Int) {
        var rng = SplitMix64(state: UInt64(seed) &* 31_337)
        let ops = Self.randomOps(count: 30, using: &rng)
        let horizon = Stamp(hlc: clock(8), opID: "")
        let (old, new) = (ops.filter { $0.stamp < horizon }, ops.filter { $0.stamp >= horizon })
        var unsettled = Replica()
        unsettled.apply(old.shuffled(using: &rng))
        var settled = unsettled
        for (key, var record) in settled.records {
            let before = record.state.visibleData
            _ = record.state.settleMerged(before: horizon)
            #expect(record.state.visibleData == before, "seed \(seed): settling changed what readers see")
            #expect(record.state.merged.values.allSatisfy { field in
                switch field.kind {
                case .counter(let counter): return counter.increments.keys.allSatisfy { $0 >= horizon }
                case .set(let set): return set.added.values.allSatisfy { $0.stamp >= horizon } && set.removed.values.allSatisfy { $0 >= horizon }
                }
            })
            settled.records[key] = record
        }
        let order = new.shuffled(using: &rng)
        unsettled.apply(order)
        settled.apply(order)
        for key in unsettled.records.keys {
            #expect(settled.records[key]?.state.visibleData == unsettled.records[key]?.state.visibleData, "seed \(seed) \(key)")
        }
    }

    @Test(arguments: 0..<100)
    func fieldClocksOfMergedFieldsRestoreExactly(seed: Int) {
        var rng = SplitMix64(state: UInt64(seed) &* 7_919)
        let ops = Self.randomOps(count: 25, using: &rng)
        var replica = Replica()
        replica.apply(ops.shuffled(using: &rng))
        for (key, record) in replica.records {
            let state = record.state
            let restored = RecordState.restoringFieldClocks(
                state.storedFieldClocks, fields: state.fields, writeClock: state.writeClock, merged: state.merged)
            #expect(restored == state.fieldClocks, "seed \(seed) \(key)")
        }
    }
}
