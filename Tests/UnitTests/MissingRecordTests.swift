import SyncModels
import Testing

/// "Why doesn't device D have record R" from facts alone: each cause, and the order in
/// which they are checked when several hold.
@Suite("Missing record")
struct MissingRecordTests {
    static let present = MissingRecordFacts(
        collection: "tasks", deviceRevoked: false, isMember: true, record: .init(version: 10, deleted: false), purgeHorizon: 0,
        newestJob: .init(jobID: "j1", status: "succeeded", opType: "upsert", result: "applied"),
        cursor: .init(cursor: 12, collections: nil, pulledAt: "2026-11-29T10:00:00.000Z"), openStreams: 1)

    func cause(_ change: (inout MissingRecordFacts) -> Void) -> MissingRecordAnswer.Cause {
        var facts = Self.present
        change(&facts)
        return MissingRecordAnswer(facts).cause
    }

    @Test func eachFactGivesItsCause() {
        #expect(cause { _ in } == .delivered)
        #expect(cause { $0.cursor?.cursor = 9 } == .notYetPulled)
        #expect(cause { $0.cursor = nil } == .notYetPulled)
        #expect(cause { $0.cursor?.collections = ["notes"] } == .notYetPulled)
        #expect(cause { $0.cursor?.collections = ["notes", "tasks"] } == .delivered)
        #expect(cause { $0.deviceRevoked = true } == .deviceRevoked)
        #expect(cause { $0.isMember = false } == .notAMember)
        for status in ["queued", "processing", "retrying"] {
            #expect(cause { $0.newestJob?.status = status; $0.newestJob?.result = nil } == .jobQueued)
        }
        for status in ["dead", "discarded"] { #expect(cause { $0.newestJob?.status = status } == .refused) }
        #expect(cause { $0.newestJob?.result = "rejected"; $0.newestJob?.reason = "rule" } == .refused)
        #expect(cause { $0.newestJob?.result = "conflict" } == .refused)
        #expect(cause { $0.newestJob?.result = "superseded" } == .superseded)
        #expect(cause { $0.record?.deleted = true } == .deleted)
        #expect(cause { $0.record = nil; $0.newestJob?.opType = "delete"; $0.purgeHorizon = 12 } == .purged)
        #expect(cause { $0.purgeHorizon = 13 } == .purged, "a cursor behind the horizon starts over")
        #expect(cause { $0.record = nil; $0.newestJob = nil } == .neverWritten)
        #expect(cause { $0.record = nil; $0.newestJob = nil; $0.purgeHorizon = 40 } == .neverWritten)
    }

    @Test func theFirstCauseThatHoldsIsNamed() {
        #expect(cause { $0.deviceRevoked = true; $0.isMember = false; $0.newestJob?.status = "queued" } == .deviceRevoked)
        #expect(cause { $0.isMember = false; $0.newestJob?.status = "queued" } == .notAMember)
        #expect(cause { $0.newestJob?.status = "queued"; $0.newestJob?.result = nil; $0.cursor?.cursor = 1 } == .jobQueued)
        #expect(cause { $0.newestJob?.result = "rejected"; $0.cursor?.cursor = 1 } == .refused)
    }

    @Test func theAnswerSaysWhatThePeopleNeed() {
        var facts = Self.present
        facts.cursor?.cursor = 9
        facts.openStreams = 0
        let behind = MissingRecordAnswer(facts).detail
        #expect(behind.contains("cursor 9") && behind.contains("version 10") && behind.contains("no open stream"))
        facts.newestJob = .init(jobID: "j9", status: "succeeded", opType: "patch", result: "rejected", reason: "rule", rule: "tasks.immutable.kind")
        let refused = MissingRecordAnswer(facts).detail
        #expect(refused.contains("j9") && refused.contains("tasks.immutable.kind"))
    }
}
