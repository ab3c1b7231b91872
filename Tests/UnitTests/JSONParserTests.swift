import Foundation
import SyncModels
import Testing

@Suite("JSON reader and writer")
struct JSONParserTests {
    @Test func parsesEveryKind() throws {
        let value = try JSONParser.parse(#" {"a": [1, -2.5, 1e3, true, false, null], "s": "x\"\\\/\n\u00e9\ud83d\ude00", "o": {}} "#)
        #expect(value == .object([
            "a": .array([.int(1), .double(-2.5), .double(1000), .bool(true), .bool(false), .null]),
            "s": .string("x\"\\/\né😀"),
            "o": .object([:]),
        ]))
    }

    @Test(arguments: ["", "{", "[1,]", "{\"a\" 1}", "01", "1.", "-", "\"\\x\"", "tru", "{} x", "\"a\u{01}\"", "1e", "NaN"])
    func refusesMalformedInput(_ text: String) {
        #expect(throws: JSONParser.Failure.self) { try JSONParser.parse(text) }
    }

    @Test func refusesExcessiveNesting() {
        let deep = String(repeating: "[", count: 1000) + String(repeating: "]", count: 1000)
        #expect(throws: JSONParser.Failure.self) { try JSONParser.parse(deep) }
    }

    @Test func largeIntegersStayExact() throws {
        #expect(try JSONParser.parse("9007199254740993") == .int(9_007_199_254_740_993))
        #expect(try JSONParser.parse("99999999999999999999") == .double(1e20))
    }

    @Test func writerIsCompactSortedAndRoundTrips() throws {
        let value: JSONValue = .object(["b": .string("a/b\t\"q\"\u{01}"), "a": .array([.int(1), .double(0.5), .null])])
        let text = JSONWriter.string(value)
        #expect(text == #"{"a":[1,0.5,null],"b":"a/b\t\"q\"\u0001"}"#)
        #expect(try JSONParser.parse(text) == value)
        // Foundation agrees that it is JSON.
        #expect((try? JSONSerialization.jsonObject(with: Data(text.utf8))) != nil)
    }

    @Test func opsRoundTripThroughTheirStoredForm() {
        let ops = [
            Op(opID: "00000000-0000-4000-8000-000000000001", type: .upsert, collection: "c", id: "i",
               data: ["t": .string("x")], hlc: "1763800000000-00001-d", ifVersion: 3),
            Op(opID: "00000000-0000-4000-8000-000000000002", type: .publish, collection: "c", id: "i",
               publicID: "pub-1", canFork: true, rejected: "clock_skew"),
        ]
        #expect(Op.decodeStored(Op.encodeStored(ops)) == ops)
        #expect(Op.decodeStored("[{\"op_id\":1}]") == nil)
    }

    @Test func storedResultsAreWhatCodableWritesLessTheirOpIDs() throws {
        let current = RecordView(
            collection: "notes", id: "n1", version: 7, deleted: false, data: ["t": .string("é \"q\""), "n": .int(3)],
            updatedAt: "2026-11-23T10:00:00.000Z", updatedBy: "7f0c8a2e-0000-4000-8000-000000000001",
            hlc: "0001763892000000-0000-d", visibility: .public, publicID: "p1", canFork: true)
        let results = [
            OpResult(opID: "0f8e8d5e-5b6a-4c1e-9a51-2f1f3a6c7b01", status: .applied, version: 12),
            OpResult(opID: "1f8e8d5e-5b6a-4c1e-9a51-2f1f3a6c7b01", status: .duplicate),
            OpResult(opID: "2f8e8d5e-5b6a-4c1e-9a51-2f1f3a6c7b01", status: .rejected, reason: RejectReason.forbidden),
            OpResult(opID: "3f8e8d5e-5b6a-4c1e-9a51-2f1f3a6c7b01", status: .conflict, current: current),
            OpResult(opID: "4f8e8d5e-5b6a-4c1e-9a51-2f1f3a6c7b01", status: .superseded, version: 9_000_000_000_000_000),
        ]
        let stored = try OpResult.encodeStored(results)
        #expect(!stored.contains("op_id"))
        let unnamed = results.map { OpResult(opID: "", status: $0.status, version: $0.version, reason: $0.reason, current: $0.current) }
        #expect(stored == (try JSONCoding.encodeString(unnamed)).replacingOccurrences(of: #""op_id":"","#, with: ""))
        #expect(try OpResult.decodeStored(stored, opIDs: results.map(\.opID)) == results)
        #expect(try OpResult.encodeStored([]) == "[]")
    }

    @Test func resultsStoredWithTheirOpIDsReadAsBefore() throws {
        let results = [
            OpResult(opID: "0f8e8d5e-5b6a-4c1e-9a51-2f1f3a6c7b01", status: .applied, version: 12),
            OpResult(opID: "1f8e8d5e-5b6a-4c1e-9a51-2f1f3a6c7b01", status: .rejected, reason: RejectReason.stale),
        ]
        #expect(try OpResult.decodeStored(JSONCoding.encodeString(results), opIDs: []) == results)
        #expect(throws: DecodingError.self) { try OpResult.decodeStored(#"[{"status":"applied"}]"#, opIDs: []) }
    }
}
