import Foundation
import SyncModels
@testable import SynclineClient
import Testing

/// The client's pure parts and its local store, without servers.
@Suite("Client logic")
struct ClientLogicTests {
    @Test func backoffGrowsWithJitterIsCappedAndHonoursRetryAfter() {
        var backoff = Backoff(base: 0.25, cap: 2)
        #expect([backoff.next(random: 1), backoff.next(random: 1), backoff.next(random: 1), backoff.next(random: 1)] == [0.25, 0.5, 1, 2])
        #expect(backoff.next(random: 1) == 2, "capped")
        #expect(backoff.next(random: 0.5) == 1, "full jitter")
        #expect(backoff.next(retryAfter: 7, random: 0.1) == 7, "never sooner than Retry-After")
        backoff.reset()
        #expect(backoff.next(random: 1) == 0.25)
        // The services' broker reconnects: the same doubling, without jitter.
        var reconnect = Backoff(base: 0.25, cap: 10, jitter: false)
        #expect((0..<8).map { _ in reconnect.next(random: 0) } == [0.25, 0.5, 1, 2, 4, 8, 10, 10])
    }

    @Test func serverSentEventsSplitAcrossChunksAndLineEndings() {
        var parser = ServerSentEvents()
        #expect(parser.feed(Array("data: {\"type\":\"hel".utf8)).isEmpty)
        #expect(parser.feed(Array("lo\"}\n\n: comment\n\ndata: a\r\ndata: b\r\n\r\nda".utf8)) == [#"{"type":"hello"}"#, "a\nb"])
        #expect(parser.feed(Array("ta:c\n\n".utf8)) == ["c"])
    }

    /// The op and the file a problem names are read from its members, never its detail.
    @Test func aProblemNamesTheOpItRefusedInItsMembers() {
        func answer(_ status: Int, _ body: String) -> PushAnswer {
            ServerAPI.Answer(status: status, headers: [:], body: Data(body.utf8)).pushAnswer(namesSpace: false, batchOps: 3)
        }
        #expect(answer(422, #"{"detail":"ops[7]: worded any way","op_index":12,"pointer":"/ops/12/data"}"#)
                == .setAside(opIndex: 12, reason: "ops[7]: worded any way", rulesVersion: nil))
        #expect(answer(422, #"{"detail":"ops[3]: no member"}"#) == .setAside(opIndex: nil, reason: "ops[3]: no member", rulesVersion: nil))
        let missing = answer(409, #"{"code":"blob_missing","detail":"x","op_index":0,"sha256":"\#(String(repeating: "a", count: 64))"}"#)
        #expect(missing == .fileMissing(sha256: String(repeating: "a", count: 64), opIndex: 0, detail: "x"))
    }

    static func server(_ data: [String: JSONValue]?, hlc: String, version: Int64 = 5) -> RecordView {
        RecordView(collection: "todos", id: "t1", version: version, deleted: data == nil, data: data, hlc: hlc)
    }

    @Test func pendingOpsApplyOnTheServersRecordByTheMergeRules() {
        let base = Self.server(["title": "server", "n": 1], hlc: clock(10))
        let state = LocalMerge.apply([patch(1, ["n": 2], at: 20), upsert(2, ["title": "old"], at: 5)], to: base)
        #expect(state?.visibleData == ["title": "server", "n": 2], "an op older than the server's record loses, a newer one wins")
        let deleted = LocalMerge.apply([delete(3, at: 30)], to: base)
        #expect(deleted?.deleted == true)
        #expect(LocalMerge.apply([publish(4, "only-a-publish", at: 30)], to: nil)?.isShown == false, "no phantom locally either")
        #expect(LocalMerge.apply([fork(5, "someone-elses", at: 30)], to: nil) == nil, "a fork shows once the server copied")
    }

    static func store() throws -> LocalStore {
        try LocalStore(path: NSTemporaryDirectory() + "client-\(UUID().uuidString).sqlite")
    }

    @Test func batchesHoldAtMost500OpsAnd1MiBAndAreResentUnchanged() throws {
        let store = try Self.store()
        for n in 0..<600 {
            _ = try store.enqueue(
                Op(opID: opID(n), type: .upsert, collection: "todos", id: "r\(n)", data: ["n": .int(Int64(n))]),
                device: "dev", now: Date())
        }
        let first = try #require(try store.nextBatch(device: "dev", space: nil, maxOps: 500, maxBytes: 1_000_000))
        #expect(first.opIDs.count == 500)
        #expect(first.opIDs == (0..<500).map(opID), "oldest first")
        let again = try #require(try store.nextBatch(device: "dev", space: nil, maxOps: 500, maxBytes: 1_000_000))
        #expect(again == first, "an unanswered batch is sent again with the same key and body")
        try store.batchAccepted(first, jobID: "job-1")
        let second = try #require(try store.nextBatch(device: "dev", space: nil, maxOps: 500, maxBytes: 1_000_000))
        #expect(second.opIDs.count == 100 && second.idempotencyKey != first.idempotencyKey)
        try store.batchDissolved(second)
        let small = try #require(try store.nextBatch(device: "dev", space: nil, maxOps: 500, maxBytes: 2_000))
        #expect(small.body.count <= 2_000 && small.opIDs.count < 100)
        let body = try #require(try JSONParser.parse(small.body).objectValue)
        #expect(body["device_id"]?.stringValue == "dev")
        #expect(body["ops"]?.arrayValue?.count == small.opIDs.count)
    }

    @Test func aRefusedOpIsSetAsideAndTheRestGoesOn() throws {
        let store = try Self.store()
        for n in 0..<3 {
            _ = try store.enqueue(
                Op(opID: opID(n), type: .upsert, collection: "todos", id: "r\(n)", data: ["n": .int(Int64(n))]),
                device: "dev", now: Date())
        }
        let batch = try #require(try store.nextBatch(device: "dev", space: nil, maxOps: 500, maxBytes: 1_000_000))
        #expect(try store.batchRefused(batch, setAside: 1, reason: "ops[1]: too big") == [opID(1)])
        #expect(try store.setAside().map(\.opID) == [opID(1)])
        let shown = try store.record("todos", "r1")
        #expect(shown?.data == ["n": 1] && shown?.syncState == .setAside(reason: "ops[1]: too big"),
                "a set-aside edit keeps showing, marked, until it is retried or dropped: \(String(describing: shown))")
        #expect(try store.record("todos", "r0")?.syncState == .pending)
        let next = try #require(try store.nextBatch(device: "dev", space: nil, maxOps: 500, maxBytes: 1_000_000))
        #expect(next.opIDs == [opID(0), opID(2)])
        #expect(try store.status().pending == 2 && store.status().setAside == 1)
    }

    @Test func aLocalWriteTakesAClockPastEveryPulledOne() throws {
        let store = try Self.store()
        let ahead = "\(Int64(Date().timeIntervalSince1970 * 1000) + 3_600_000)-00007-other"
        _ = try store.applyPage([Self.server(["title": "theirs"], hlc: ahead)], cursor: "5", hasMore: false)
        let op = try store.enqueue(
            Op(opID: opID(1), type: .patch, collection: "todos", id: "t1", data: ["title": "mine"]), device: "dev", now: Date())
        #expect(try #require(op.hlc) > ahead)
        #expect(try store.record("todos", "t1")?.data == ["title": "mine"])
        #expect(try store.cursor == "5")
    }
}
