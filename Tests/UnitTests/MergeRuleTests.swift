import SyncModels
import Testing

@Suite("Merge rules")
struct MergeRuleTests {
    @Test func upsertCreatesRecordWithDocument() {
        var replica = Replica()
        let results = replica.apply([upsert(1, ["title": "a", "done": false], at: 10)])
        #expect(results.map(\.status) == [.applied])
        #expect(results[0].version == 1)
        #expect(replica.state()?.visibleData == ["title": "a", "done": false])
    }

    @Test func upsertRemovesOlderFieldsAbsentFromDocument() {
        var replica = Replica()
        replica.apply([upsert(1, ["title": "a", "done": false], at: 10)])
        replica.apply([upsert(2, ["title": "b"], at: 20)])
        #expect(replica.state()?.visibleData == ["title": "b"])
    }

    @Test func upsertKeepsNewerFieldsAbsentFromDocument() {
        var replica = Replica()
        replica.apply([patch(1, ["done": true], at: 30)])
        replica.apply([upsert(2, ["title": "b"], at: 20)])
        #expect(replica.state()?.visibleData == ["title": "b", "done": true])
    }

    @Test func upsertStoresNullAsValue() {
        var replica = Replica()
        replica.apply([upsert(1, ["note": .null], at: 10)])
        #expect(replica.state()?.visibleData == ["note": .null])
    }

    @Test func olderUpsertIsSuperseded() {
        var replica = Replica()
        replica.apply([upsert(1, ["title": "new"], at: 20)])
        let results = replica.apply([upsert(2, ["title": "old", "extra": 1], at: 10)])
        #expect(results.map(\.status) == [.superseded])
        #expect(replica.state()?.visibleData == ["title": "new"])
        #expect(replica.version() == 1)
    }

    @Test func patchSetsOnlyNewerFieldsAndNullRemoves() {
        var replica = Replica()
        replica.apply([upsert(1, ["title": "a", "done": false, "tag": "x"], at: 10)])
        replica.apply([patch(2, ["done": true, "tag": .null], at: 20)])
        #expect(replica.state()?.visibleData == ["title": "a", "done": true])
        let late = replica.apply([patch(3, ["done": false, "title": "z"], at: 15)])
        #expect(late.map(\.status) == [.applied])  // title is newer than 10, done is not newer than 20
        #expect(replica.state()?.visibleData == ["title": "z", "done": true])
    }

    @Test func patchThatOnlyRemovesCountsAsWrite() {
        var replica = Replica()
        replica.apply([upsert(1, ["title": "a", "tag": "x"], at: 10)])
        let results = replica.apply([patch(2, ["tag": .null], at: 20)])
        #expect(results.map(\.status) == [.applied])
        #expect(replica.state()?.visibleData == ["title": "a"])
    }

    @Test func removedFieldIsNotResurrectedByOlderPatch() {
        var replica = Replica()
        replica.apply([patch(1, ["tag": .null], at: 20)])
        replica.apply([patch(2, ["tag": "old"], at: 10)])
        #expect(replica.state()?.visibleData == [:])
    }

    @Test func deleteNewerThanEveryWriteDeletes() {
        var replica = Replica()
        replica.apply([upsert(1, ["title": "a"], at: 10)])
        let results = replica.apply([delete(2, at: 20)])
        #expect(results.map(\.status) == [.applied])
        #expect(replica.state()?.deleted == true)
        #expect(replica.state()?.visibleData == nil)
    }

    @Test func deleteOlderThanAWriteKeepsFieldsWrittenAfterIt() {
        var replica = Replica()
        replica.apply([upsert(1, ["title": "a", "done": false], at: 10)])
        replica.apply([patch(2, ["done": true], at: 30)])
        replica.apply([delete(3, at: 20)])
        #expect(replica.state()?.deleted == false)
        #expect(replica.state()?.visibleData == ["done": true])
    }

    @Test func laterWriteResurrectsDeletedRecordWithJustItsFields() {
        var replica = Replica()
        replica.apply([upsert(1, ["title": "a", "done": false], at: 10)])
        replica.apply([delete(2, at: 20)])
        replica.apply([patch(3, ["done": true], at: 30)])
        #expect(replica.state()?.deleted == false)
        #expect(replica.state()?.visibleData == ["done": true])
    }

    @Test func deleteOfUnknownRecordCreatesTombstone() {
        var replica = Replica()
        let results = replica.apply([delete(1, at: 10, id: "ghost")])
        #expect(results.map(\.status) == [.applied])
        #expect(replica.state("ghost")?.deleted == true)
        #expect(replica.version("ghost") == 1)
    }

    @Test func olderWriteAfterTombstoneStaysDeleted() {
        var replica = Replica()
        replica.apply([delete(1, at: 20)])
        let results = replica.apply([upsert(2, ["title": "a"], at: 10)])
        #expect(results.map(\.status) == [.superseded])
        #expect(replica.state()?.deleted == true)
    }

    @Test func tiesOnHLCAreBrokenByOpID() {
        let sameTime = 10
        var forward = Replica()
        forward.apply([patch(1, ["title": "one"], at: sameTime)])
        forward.apply([patch(2, ["title": "two"], at: sameTime)])
        var backward = Replica()
        backward.apply([patch(2, ["title": "two"], at: sameTime)])
        backward.apply([patch(1, ["title": "one"], at: sameTime)])
        #expect(forward.state()?.visibleData == ["title": "two"])
        #expect(backward.state()?.visibleData == ["title": "two"])
    }

    @Test func ifVersionMatchingApplies() {
        var replica = Replica()
        replica.apply([upsert(1, ["title": "a"], at: 10)])
        let results = replica.apply([patch(2, ["title": "b"], at: 20, ifVersion: 1)])
        #expect(results.map(\.status) == [.applied])
    }

    @Test func ifVersionMismatchConflictsWithCurrentRecord() {
        var replica = Replica()
        replica.apply([upsert(1, ["title": "a"], at: 10)])
        let results = replica.apply([patch(2, ["title": "b"], at: 20, ifVersion: 7)])
        #expect(results[0].status == .conflict)
        #expect(results[0].current?.data == ["title": "a"])
        #expect(replica.state()?.visibleData == ["title": "a"])
    }

    @Test func ifVersionZeroMatchesMissingAndDeletedRecords() {
        var replica = Replica()
        #expect(replica.apply([upsert(1, ["title": "a"], at: 10, ifVersion: 0)]).map(\.status) == [.applied])
        #expect(replica.apply([upsert(2, ["title": "b"], at: 20, ifVersion: 0)]).map(\.status) == [.conflict])
        replica.apply([delete(3, at: 30)])
        #expect(replica.apply([upsert(4, ["title": "c"], at: 40, ifVersion: 0)]).map(\.status) == [.applied])
    }

    @Test func repeatedOpIDIsDuplicateAcrossAndWithinJobs() {
        var replica = Replica()
        let op = upsert(1, ["title": "a"], at: 10)
        #expect(replica.apply([op, op]).map(\.status) == [.applied, .duplicate])
        #expect(replica.apply([op]).map(\.status) == [.duplicate])
        #expect(replica.counter == 1)
    }

    @Test func rejectedOpIsNotRememberedAndNeverFailsTheJob() {
        var replica = Replica()
        var skewed = upsert(1, ["title": "a"], at: 10)
        skewed.rejected = RejectReason.clockSkew
        let results = replica.apply([skewed, upsert(2, ["title": "b"], at: 20)])
        #expect(results.map(\.status) == [.rejected, .applied])
        #expect(results[0].reason == "clock_skew")
        #expect(!replica.known.contains(opID(1)))
    }

    @Test func visibilityIsLastWriterWinsInEitherOrder() {
        for ops in [[publish(1, "pre-charter", at: 10), unpublish(2, at: 20)], [unpublish(2, at: 20), publish(1, "pre-charter", at: 10)]] {
            var replica = Replica()
            replica.apply([upsert(0, ["title": "Checklist"], at: 5)])
            let results = replica.apply(ops)
            #expect(replica.state()?.visibility?.isPublic == false)
            #expect(replica.state()?.shownPublicID == nil)
            #expect(results.contains { $0.status == .applied })
        }
        var replica = Replica()
        replica.apply([upsert(0, ["title": "Checklist"], at: 5), publish(1, "pre-charter", at: 30, canFork: true), unpublish(2, at: 20)])
        #expect(replica.state()?.shownPublicID == "pre-charter")
        #expect(replica.state()?.visibility?.canFork == true)
    }

    @Test func aPublicIDHeldByAnotherRecordIsRejected() {
        var replica = Replica()
        replica.foreignPublicIDs = ["someone-elses"]
        let results = replica.apply([
            upsert(1, ["title": "a"], at: 1, id: "a"), upsert(2, ["title": "b"], at: 1, id: "b"),
            publish(3, "mine", at: 2, id: "a", canFork: false),
            publish(4, "mine", at: 3, id: "b"),           // held by record a (this job)
            publish(5, "someone-elses", at: 4, id: "b"),  // held by another user's record
            publish(6, "mine", at: 5, id: "a"),           // the holder may publish it again
        ])
        #expect(results.map(\.status) == [.applied, .applied, .applied, .rejected, .rejected, .applied])
        #expect(results[3].reason == RejectReason.publicIDTaken && results[4].reason == RejectReason.publicIDTaken)
        #expect(!replica.known.contains(opID(4)), "a rejected op is not remembered")
        // Once a unpublishes, b may take the id.
        let later = replica.apply([unpublish(7, at: 6, id: "a"), publish(8, "mine", at: 7, id: "b")])
        #expect(later.map(\.status) == [.applied, .applied])
        #expect(replica.state("b")?.shownPublicID == "mine")
    }

    @Test func anOpNoNewerThanAPurgedDeleteCannotRecreateItsRecord() {
        let purged = Stamp(hlc: clock(50), opID: opID(99))
        let outcome = JobApplier.apply(
            ops: [upsert(1, ["t": "old"], at: 40, id: "gone"), upsert(2, ["t": "new"], at: 60, id: "fresh"),
                  upsert(3, ["t": "kept"], at: 40, id: "live")],
            records: [RecordKey(collection: "todos", id: "live"): StoredRecord(
                key: RecordKey(collection: "todos", id: "live"), version: 7, state: RecordState())],
            knownOpIDs: [], counter: 7, deviceID: "dev", purgeClock: purged)
        #expect(outcome.results.map(\.status) == [.rejected, .applied, .applied])
        #expect(outcome.results[0].reason == RejectReason.stale)
        #expect(!outcome.remembered.contains(opID(1)))
    }

    @Test func aDeletedRecordIsNeverListedPublicly() {
        var replica = Replica()
        replica.apply([upsert(1, ["title": "a"], at: 1), publish(2, "gone-soon", at: 2), delete(3, at: 3)])
        #expect(replica.state()?.visibility?.publicID == "gone-soon")
        #expect(replica.state()?.shownPublicID == nil)
        replica.apply([upsert(4, ["title": "back"], at: 4)])
        #expect(replica.state()?.shownPublicID == "gone-soon")
    }

    @Test func aPublishLeavingOutCanForkAndListedIsForkableAndListed() {
        var replica = Replica()
        replica.apply([upsert(1, ["title": "Guide"], at: 1), publish(2, "guide-one", at: 2)])
        #expect(replica.state()?.visibility?.canFork == true)
        #expect(replica.state()?.publicVisibility == .public)
        replica.apply([publish(3, "guide-one", at: 3, canFork: false, listed: false)])
        #expect(replica.state()?.publicVisibility == .unlisted)
        #expect(replica.state()?.visibility?.canFork == false)
        #expect(replica.records[RecordKey(collection: "todos", id: "r1")]?.view.publicID == "guide-one")
    }

    @Test func aPublishBeforeTheDataCreatesNothingShownAndWinsWhenTheDataArrives() {
        for order in [[0, 1], [1, 0]] {
            let ops = [upsert(1, ["title": "Checklist"], at: 1), publish(2, "late-data", at: 2)]
            var replica = Replica()
            let first = replica.apply([ops[order[0]]])
            if order[0] == 1 {
                #expect(first.map(\.status) == [.applied], "the visibility clock can still decide a merge")
                #expect(replica.state()?.isShown == false)
                #expect(replica.state()?.publicVisibility == .private)
                #expect(replica.records.values.first?.view.visibility == .private)
            }
            replica.apply([ops[order[1]]])
            #expect(replica.state()?.isShown == true)
            #expect(replica.state()?.publicVisibility == .public, "order \(order)")
            #expect(replica.state()?.shownPublicID == "late-data")
        }
        var tombstone = Replica()
        tombstone.apply([delete(1, at: 1), publish(2, "on-a-tombstone", at: 2)])
        #expect(tombstone.state()?.publicVisibility == .private)
        #expect(tombstone.records.values.first?.view.publicID == nil)
    }

    @Test func aForkCopiesTheSourceAsAnUpsertAndRecordsWhereItCameFrom() {
        var replica = Replica()
        replica.foreignSources = ["pre-charter": foreignSource(["title": "Pre-charter", "items": .array(["life jackets"])])]
        replica.apply([upsert(1, ["title": "mine", "note": "older"], at: 1, id: "copy")])
        let results = replica.apply([fork(2, "pre-charter", at: 5, id: "copy")])
        #expect(results.map(\.status) == [.applied])
        let state = replica.state("copy")
        #expect(state?.fields == ["title": "Pre-charter", "items": .array(["life jackets"])], "older fields go, as in an upsert")
        #expect(state?.fork?.publicID == "pre-charter")
        #expect(replica.records[RecordKey(collection: "todos", id: "copy")]?.view.forkedFrom == "pre-charter")
        #expect(replica.forked == [ForkedRecord(space: someoneElsesSpace, key: RecordKey(collection: "guides", id: "src"))])
        // Newer local edits survive a fork applied late (it is an upsert at its own clock).
        replica.apply([patch(3, ["note": "mine"], at: 9, id: "copy"), fork(4, "pre-charter", at: 7, id: "copy")])
        #expect(replica.state("copy")?.fields["note"] == "mine")
    }

    /// An unlisted record is as private as its id: a fork copies it but passes the id on
    /// to nobody who reads the fork. A record of the fork's own space is named either way.
    @Test func aForkNamesOnlyASourceItsReadersCouldReadAnyway() {
        var replica = Replica()
        replica.foreignSources = ["secret-link": foreignSource(["title": "Unlisted"], listed: false)]
        #expect(replica.apply([fork(1, "secret-link", at: 1, id: "copy")]).map(\.status) == [.applied])
        #expect(replica.state("copy")?.fields == ["title": "Unlisted"])
        #expect(replica.records[RecordKey(collection: "todos", id: "copy")]?.view.forkedFrom == nil)
        #expect(replica.state("copy")?.fork?.clock.hlc == clock(1), "the fork still orders later forks")

        replica.apply([upsert(2, ["title": "ours"], at: 2, id: "a"), publish(3, "own-unlisted", at: 3, id: "a", listed: false)])
        replica.apply([fork(4, "own-unlisted", at: 4, id: "copy")])
        #expect(replica.records[RecordKey(collection: "todos", id: "copy")]?.view.forkedFrom == "own-unlisted")
    }

    /// An op refused before the merge (beyond the pusher's budget) copies nothing, even
    /// when its source exists.
    @Test func aForkRefusedAtIntakeCopiesNothing() {
        var replica = Replica()
        replica.foreignSources = ["exists": foreignSource(["title": "x"])]
        var refused = fork(1, "exists", at: 1)
        refused.rejected = RejectReason.rateLimited
        #expect(replica.apply([refused]).map(\.reason) == [RejectReason.rateLimited])
        #expect(replica.records.isEmpty && replica.forked.isEmpty && replica.known.isEmpty)
    }

    @Test func aForkOfAnUnknownOrLockedRecordIsRejectedAndNotRemembered() {
        var replica = Replica()
        replica.foreignSources = ["locked": foreignSource(["title": "x"], canFork: false)]
        let results = replica.apply([fork(1, "nowhere", at: 1), fork(2, "locked", at: 2)])
        #expect(results.map(\.status) == [.rejected, .rejected])
        #expect(results.map(\.reason) == [RejectReason.notFound, RejectReason.notForkable])
        #expect(replica.known.isEmpty)
        #expect(replica.records.isEmpty && replica.forked.isEmpty)
    }

    @Test func aForkOfOwnRecordReadsItAsTheJobLeftIt() {
        var replica = Replica()
        let results = replica.apply([
            upsert(1, ["title": "draft"], at: 1, id: "a"), publish(2, "own-guide", at: 2, id: "a"),
            patch(3, ["title": "final"], at: 3, id: "a"), fork(4, "own-guide", at: 4, id: "b"),
        ])
        #expect(results.map(\.status) == [.applied, .applied, .applied, .applied])
        #expect(replica.state("b")?.fields == ["title": "final"])
        #expect(replica.forked == [ForkedRecord(space: nil, key: RecordKey(collection: "todos", id: "a"))])
        // Unpublished, unlisted-but-readable, and deleted sources.
        replica.apply([publish(5, "own-guide", at: 5, id: "a", listed: false)])
        #expect(replica.apply([fork(6, "own-guide", at: 6, id: "c")]).map(\.status) == [.applied])
        replica.apply([delete(7, at: 7, id: "a")])
        #expect(replica.apply([fork(8, "own-guide", at: 8, id: "d")]).first?.reason == RejectReason.notFound)
    }

    @Test func versionsAreUniqueAndIncreasing() {
        var replica = Replica()
        let results = replica.apply([
            upsert(1, ["x": 1], at: 10, id: "a"), upsert(2, ["x": 1], at: 11, id: "b"), patch(3, ["y": 2], at: 12, id: "a"),
        ])
        #expect(results.compactMap(\.version) == [1, 2, 3])
        #expect(replica.version("a") == 3)
        #expect(replica.version("b") == 2)
    }
}
