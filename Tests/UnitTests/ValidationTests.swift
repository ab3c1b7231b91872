import Foundation
import SyncModels
import Testing

@Suite("Push validation")
struct ValidationTests {
    let device = "8c1d2f3e-0000-4000-8000-000000000001"

    func body(_ ops: String) -> Data { Data(#"{"device_id":"\#(device)","ops":[\#(ops)]}"#.utf8) }

    func op(_ fields: String) -> String {
        #"{"op_id":"0f8e0000-0000-4000-8000-000000000001","collection":"todos","id":"t1",\#(fields)}"#
    }

    func failure(_ data: Data) -> ValidationFailure? {
        do {
            _ = try PushValidation.parse(data)
            return nil
        } catch {
            return error
        }
    }

    @Test func acceptsEveryOpType() throws {
        let push = try PushValidation.parse(body([
            op(#""type":"upsert","data":{"title":"x"},"hlc":"1763800000000-00001-dev1""#),
            op(#""type":"patch","data":{"done":true}"#),
            op(#""type":"delete","if_version":41"#),
            op(#""type":"publish","public_id":"pre-charter-a1b2","can_fork":true"#),
            op(#""type":"unpublish""#),
        ].joined(separator: ",")))
        #expect(push.ops.map(\.type) == [.upsert, .patch, .delete, .publish, .unpublish])
        #expect(push.ops[0].hlc == "1763800000000-00001-dev1")
        #expect(push.ops[2].ifVersion == 41)
    }

    @Test func opIDIsCanonicalisedToLowercase() throws {
        let push = try PushValidation.parse(body(
            #"{"op_id":"0F8E0000-0000-4000-8000-00000000000A","type":"delete","collection":"todos","id":"t1"}"#))
        #expect(push.ops[0].opID == "0f8e0000-0000-4000-8000-00000000000a")
    }

    @Test func notJSONIsBadRequest() {
        #expect(failure(Data("{nope".utf8)) == .notJSON("The request body is not valid JSON."))
    }

    @Test(arguments: [
        (#""type":"upsert","data":"text""#, "data must be an object"),
        (#""type":"explode""#, "unknown type"),
        (#""type":"patch","data":{}"#, "at least one field"),
        (#""type":"upsert","data":[1]"#, "data must be an object"),
        (#""type":"upsert","data":{"a":1},"hlc":"yesterday""#, "hlc"),
        (#""type":"delete","if_version":-1"#, "if_version"),
        (#""type":"delete","if_version":"3""#, "if_version"),
        (#""type":"publish","public_id":"A""#, "public_id"),
    ])
    func schemaViolationsNameTheOp(fields: String, fragment: String) {
        guard case .op(index: 1, let pointer, let detail, _)? = failure(body(op("\"type\":\"delete\"") + "," + op(fields))) else {
            Issue.record("expected a 422 naming op 1 for \(fields)")
            return
        }
        #expect(pointer.hasPrefix("/ops/1"), "\(pointer)")
        #expect(detail.contains(fragment), "\(detail)")
    }

    @Test func badRecordIDAndOpID() {
        let badID = #"{"op_id":"0f8e0000-0000-4000-8000-000000000001","type":"delete","collection":"todos","id":"a b"}"#
        #expect(failure(body(badID))?.detail.contains("id must match") == true)
        let badCollection = #"{"op_id":"0f8e0000-0000-4000-8000-000000000001","type":"delete","collection":"Todos","id":"t"}"#
        #expect(failure(body(badCollection))?.detail.contains("collection must match") == true)
        let badOpID = #"{"op_id":"not-a-uuid","type":"delete","collection":"todos","id":"t"}"#
        #expect(failure(body(badOpID))?.detail.contains("op_id") == true)
    }

    @Test func opCountLimits() {
        #expect(failure(body(""))?.detail.contains("1 to 500") == true)
        let many = Array(repeating: op(#""type":"delete""#), count: 501).joined(separator: ",")
        #expect(failure(body(many))?.detail.contains("not 501") == true)
        let five = Array(repeating: op(#""type":"delete""#), count: 500).joined(separator: ",")
        #expect(failure(body(five)) == nil)
    }

    @Test func dataOverLimitIsRefused() {
        let big = String(repeating: "x", count: Limits.maxDataBytes)
        #expect(failure(body(op(#""type":"upsert","data":{"t":"\#(big)"}"#)))?.detail.contains("bytes") == true)
        let fits = String(repeating: "x", count: Limits.maxDataBytes - 10)
        #expect(failure(body(op(#""type":"upsert","data":{"t":"\#(fits)"}"#))) == nil)
    }

    @Test func missingDeviceOrOps() {
        #expect(failure(Data(#"{"ops":[]}"#.utf8))?.detail.contains("device_id") == true)
        #expect(failure(Data(#"{"device_id":"d","ops":{}}"#.utf8))?.detail.contains("ops must be an array") == true)
        #expect(failure(Data("[1]".utf8)) == .invalid("The body must be a JSON object."))
    }

    @Test func names() {
        #expect(Names.isValidCollection("todos_2"))
        #expect(!Names.isValidCollection("2todos"))
        #expect(!Names.isValidCollection(String(repeating: "a", count: 65)))
        #expect(Names.isValidRecordID("a.b:c-d_E"))
        #expect(!Names.isValidRecordID(String(repeating: "a", count: 129)))
        #expect(Names.isValidPublicID("abc"))
        #expect(!Names.isValidPublicID("-ab"))
        #expect(!Names.isValidPublicID("ab"))
    }
}

@Suite("Hybrid logical clocks")
struct HLCTests {
    @Test func parsesAndFormats() throws {
        let hlc = try #require(HLC("1763800000000-00042-8c1d"))
        #expect(hlc.milliseconds == 1_763_800_000_000)
        #expect(hlc.counter == 42)
        #expect(hlc.node == "8c1d")
        #expect(hlc.description == "1763800000000-00042-8c1d")
        #expect(HLC("176380000000-00042-x") == nil)
        #expect(HLC("1763800000000-0042-x") == nil)
        #expect(HLC("1763800000000-00042-") == nil)
    }

    @Test func ordersByTimeThenCounterThenNode() {
        let a = HLC("1763800000000-00001-zz")!
        let b = HLC("1763800000000-00002-aa")!
        let c = HLC("1763800000001-00000-aa")!
        #expect(a < b && b < c)
    }

    @Test func stampOrderIsHLCThenOpID() {
        let early = Stamp(hlc: "1763800000000-00001-a", opID: "ffffffff-0000-4000-8000-000000000000")
        let tieLow = Stamp(hlc: "1763800000000-00002-a", opID: "00000000-0000-4000-8000-000000000000")
        let tieHigh = Stamp(hlc: "1763800000000-00002-a", opID: "10000000-0000-4000-8000-000000000000")
        let prefixNode = Stamp(hlc: "1763800000000-00002-ab", opID: "00000000-0000-4000-8000-000000000000")
        #expect(early < tieLow && tieLow < tieHigh && tieHigh < prefixNode)
        // The stored form sorts the same way as the pair.
        #expect(tieHigh.description < prefixNode.description)
        #expect(Stamp(stored: tieHigh.description) == tieHigh)
    }

    @Test func serverStampsIncreaseStrictlyAndPassClientClocks() {
        var state = HLCState(milliseconds: 0, counter: 0)
        let first = state.next(now: 1000, node: "d")
        let second = state.next(now: 1000, node: "d")
        let third = state.next(now: 999, node: "d")  // wall clock went backwards
        #expect(first < second && second < third)
        state.observe(HLC("0000000005000-00007-zzz")!)
        let fourth = state.next(now: 1001, node: "a")
        #expect(fourth > HLC("0000000005000-00007-zzz")!)
        #expect(fourth.description == "0000000005000-00008-a")
    }

    @Test func counterOverflowMovesToNextMillisecond() {
        var state = HLCState(milliseconds: 1000, counter: HLC.maxCounter)
        let next = state.next(now: 1000, node: "d")
        #expect(next.milliseconds == 1001 && next.counter == 0)
    }
}
