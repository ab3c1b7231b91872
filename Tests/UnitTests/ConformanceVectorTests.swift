import Foundation
@testable import SyncModels
@testable import SynclineClient
import Testing

/// The merge rules and the clock, as cases every implementation must agree on: the server
/// and the Swift client (this code) and the web client (`Shared/SynclineWeb`, whose unit
/// tests read the same file). The file is generated from this code: a stale file fails
/// here, and `UPDATE_VECTORS=1 swift test --filter ConformanceVectorTests` rewrites it.
@Suite("Conformance vectors")
struct ConformanceVectorTests {
    static let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Conformance/vectors.json").path

    @Test func theVectorsFileIsWhatThisCodeComputes() throws {
        let text = try ConformanceVectors.text()
        if ProcessInfo.processInfo.environment["UPDATE_VECTORS"] == "1" {
            try text.write(toFile: Self.path, atomically: true, encoding: .utf8)
        }
        let stored = try? String(contentsOfFile: Self.path, encoding: .utf8)
        #expect(stored == text, "Tests/Conformance/vectors.json is stale: run UPDATE_VECTORS=1 swift test --filter ConformanceVectorTests")
    }

    /// Every order of a case's ops gives its expected record (everyone converges), so an implementation may
    /// apply them as they come.
    @Test func everyOrderOfEveryMergeCaseGivesTheSameRecord() {
        for merge in ConformanceVectors.mergeCases {
            let expected = ConformanceVectors.outcome(merge.ops, source: merge.source)
            for order in permutations(Array(merge.ops.indices)) {
                #expect(ConformanceVectors.outcome(order.map { merge.ops[$0] }, source: merge.source) == expected, "\(merge.name)")
            }
        }
    }

    /// The vectors' refusals are what the gateway answers a push holding the op (the
    /// client's check adds only what JSON cannot carry: NaN and the infinities).
    @Test func everyValidationCaseIsWhatTheGatewayAnswersAPush() throws {
        #expect(ConformanceVectors.validationCases.count >= 40)
        var refused = 0
        for validation in ConformanceVectors.validationCases {
            let op = ConformanceVectors.expanded(validation.op, validation.expand)
            let expected = ConformanceVectors.refusal(op)
            if expected != .null { refused += 1 }
            // JSON cannot carry NaN or an infinity: a push never holds one (a client refuses it).
            guard op.nonFiniteNumberPath("op") == nil else {
                #expect(expected != .null, "\(validation.name)")
                continue
            }
            let body = JSONWriter.bytes(["device_id": "d1", "ops": [op]])
            do {
                _ = try PushValidation.parse(Data(body))
                #expect(expected == .null, "\(validation.name): the gateway takes it")
            } catch {
                guard case .op(0, let pointer, _, let limit) = error else {
                    Issue.record("\(validation.name): \(error)")
                    continue
                }
                #expect(expected["field"] == .string(String(pointer.dropFirst("/ops/0/".count))), "\(validation.name): \(pointer)")
                #expect(expected["limit"] == (limit.map { .int(Int64($0)) } ?? .null), "\(validation.name)")
            }
        }
        #expect(refused > 20 && refused < ConformanceVectors.validationCases.count - 10)
    }

    /// A client reads both forms of a pull page as the same records (the compact one
    /// without who and when wrote them last), from the page as text.
    @Test func bothFormsOfEveryPullPageReadAsTheSameRecords() throws {
        #expect(ConformanceVectors.pullCases.count >= 5)
        for pull in ConformanceVectors.pullCases {
            let full = try #require(PullPage(json: try JSONParser.parse(JSONWriter.bytes(pull.page.json(.full)))), "\(pull.name)")
            #expect(full == pull.page, "\(pull.name)")
            let compact = try #require(PullPage(json: try JSONParser.parse(JSONWriter.bytes(pull.page.json(.compact)))), "\(pull.name)")
            #expect(compact == ConformanceVectors.held(pull.page), "\(pull.name)")
        }
    }

    /// A compact clock naming no device of its page, or a list of devices that is not
    /// one, makes the page unreadable rather than a record with a wrong clock.
    @Test func aCompactClockNamingNoDeviceOfItsPageIsUnreadable() throws {
        let page = PullPage(changes: [ConformanceVectors.pulled("t1", version: 1, at: 10)], cursor: "1", hasMore: false)
        guard case .object(var compact) = page.json(.compact), case .array(var changes)? = compact["changes"],
              case .object(var record) = changes[0]
        else { Issue.record("no compact page"); return }
        #expect(record["hlc"] == .string(ConformanceVectors.hlc(10, node: "0")))
        for clock in ["\(ConformanceVectors.hlc(10, node: "1"))", "1763800000010-00000-", "1763800000010-00000-x", "1763800000010"] {
            record["hlc"] = .string(clock)
            changes[0] = .object(record)
            compact["changes"] = .array(changes)
            #expect(PullPage(json: .object(compact)) == nil, "\(clock)")
        }
        compact["devices"] = .string(ConformanceVectors.deviceA)
        #expect(PullPage(json: .object(compact)) == nil)
    }

    func permutations(_ items: [Int]) -> [[Int]] {
        guard items.count > 1 else { return [items] }
        return items.indices.flatMap { index in
            var rest = items
            let first = rest.remove(at: index)
            return permutations(rest).map { [first] + $0 }
        }
    }
}

/// The cases and what the Swift code computes for them.
enum ConformanceVectors {
    struct MergeCase {
        let name: String
        let ops: [Op]
        /// What a fork's public id holds when the fork is applied.
        var source: [String: JSONValue]? = nil
    }

    static func hlc(_ ms: Int64, _ counter: Int = 0, node: String = "dev-a") -> String {
        HLC(milliseconds: 1_763_800_000_000 + ms, counter: counter, node: node)!.description
    }

    static func opID(_ n: Int) -> String { String(format: "00000000-0000-4000-8000-%012d", n) }

    static func op(
        _ n: Int, _ type: OpType, at ms: Int64, counter: Int = 0, node: String = "dev-a", data: [String: JSONValue]? = nil,
        publicID: String? = nil, canFork: Bool? = nil, listed: Bool? = nil, ifVersion: Int64? = nil,
        field: String? = nil, by: JSONValue? = nil, values: [JSONValue]? = nil
    ) -> Op {
        Op(opID: opID(n), type: type, collection: "todos", id: "t1", data: data, hlc: hlc(ms, counter, node: node),
           ifVersion: ifVersion, publicID: publicID, canFork: canFork, listed: listed, field: field, by: by, values: values)
    }

    static func increment(_ n: Int, _ field: String, by: JSONValue, at ms: Int64, node: String = "dev-a") -> Op {
        op(n, .increment, at: ms, node: node, field: field, by: by)
    }

    static func members(_ n: Int, _ type: OpType, _ field: String, _ values: [JSONValue], at ms: Int64) -> Op {
        op(n, type, at: ms, field: field, values: values)
    }

    static let mergeCases: [MergeCase] = [
        MergeCase(name: "a newer upsert replaces the record: fields it lacks disappear", ops: [
            op(1, .upsert, at: 1, data: ["title": "a", "done": false]), op(2, .upsert, at: 2, data: ["title": "b"]),
        ]),
        MergeCase(name: "an older upsert loses every field to a newer one", ops: [
            op(1, .upsert, at: 5, data: ["title": "new"]), op(2, .upsert, at: 3, data: ["title": "old", "extra": 1]),
        ]),
        MergeCase(name: "a patch sets fields, and null in a patch removes one", ops: [
            op(1, .upsert, at: 1, data: ["title": "a", "note": "n"]), op(2, .patch, at: 2, data: ["done": true, "note": .null]),
        ]),
        MergeCase(name: "null in an upsert is a stored value", ops: [op(1, .upsert, at: 1, data: ["title": "a", "due": .null])]),
        MergeCase(name: "fields a patch set survive an older upsert", ops: [
            op(1, .patch, at: 3, data: ["done": true, "title": "patched"]), op(2, .upsert, at: 2, data: ["title": "a", "n": 1]),
        ]),
        MergeCase(name: "a newer upsert drops the fields an older patch set", ops: [
            op(1, .patch, at: 3, data: ["done": true, "title": "patched"]), op(2, .upsert, at: 4, data: ["title": "b"]),
        ]),
        MergeCase(name: "per-field last writer wins across patches", ops: [
            op(1, .patch, at: 1, data: ["a": 1, "b": 1]), op(2, .patch, at: 2, data: ["b": 2]), op(3, .patch, at: 3, data: ["a": 3]),
        ]),
        MergeCase(name: "a record only patched exists", ops: [op(1, .patch, at: 1, data: ["a": "x"])]),
        MergeCase(name: "a patch that only removes fields still counts as a write", ops: [
            op(1, .delete, at: 1), op(2, .patch, at: 2, data: ["gone": .null]),
        ]),
        MergeCase(name: "a delete newer than every write leaves a tombstone", ops: [
            op(1, .upsert, at: 1, data: ["title": "a"]), op(2, .patch, at: 2, data: ["done": true]), op(3, .delete, at: 3),
        ]),
        MergeCase(name: "a delete of an unknown record is a tombstone", ops: [op(1, .delete, at: 1)]),
        MergeCase(name: "a write after a delete resurrects the record with only its own fields", ops: [
            op(1, .upsert, at: 1, data: ["title": "a", "n": 1]), op(2, .delete, at: 2), op(3, .patch, at: 3, data: ["n": 2]),
        ]),
        MergeCase(name: "an older delete removes only the fields older than it", ops: [
            op(1, .upsert, at: 1, data: ["title": "a"]), op(2, .patch, at: 3, data: ["n": 3]), op(3, .delete, at: 2),
        ]),
        MergeCase(name: "equal clocks: the larger op_id wins", ops: [
            op(1, .upsert, at: 1, data: ["title": "by op 1"]), op(2, .upsert, at: 1, data: ["title": "by op 2"]),
        ]),
        MergeCase(name: "equal milliseconds: the counter, then the node decides", ops: [
            op(1, .patch, at: 1, counter: 2, data: ["a": "counter 2"]), op(2, .patch, at: 1, counter: 10, data: ["a": "counter 10"]),
            op(3, .patch, at: 1, counter: 0, node: "dev-z", data: ["b": "z"]), op(4, .patch, at: 1, counter: 0, node: "dev-b", data: ["b": "b"]),
        ]),
        MergeCase(name: "publish and unpublish: the newest wins", ops: [
            op(1, .upsert, at: 1, data: ["title": "a"]), op(2, .publish, at: 2, publicID: "guide-1"), op(3, .unpublish, at: 3),
            op(4, .publish, at: 4, publicID: "guide-2", canFork: false),
        ]),
        MergeCase(name: "a publish with listed false is unlisted", ops: [
            op(1, .upsert, at: 1, data: ["title": "a"]), op(2, .publish, at: 2, publicID: "guide-1", listed: false),
        ]),
        MergeCase(name: "a publish before the record's data shows once the data arrives", ops: [
            op(1, .publish, at: 1, publicID: "guide-1"), op(2, .upsert, at: 2, data: ["title": "a"]),
        ]),
        MergeCase(name: "a publish alone creates nothing shown", ops: [op(1, .publish, at: 1, publicID: "guide-1")]),
        MergeCase(name: "a deleted record is never public", ops: [
            op(1, .upsert, at: 1, data: ["title": "a"]), op(2, .publish, at: 2, publicID: "guide-1"), op(3, .delete, at: 3),
        ]),
        MergeCase(name: "a fork copies the source as an upsert and names it", ops: [
            op(1, .patch, at: 1, data: ["mine": true]), op(2, .fork, at: 2, publicID: "guide-1"),
        ], source: ["title": "the guide", "steps": 3]),
        MergeCase(name: "a write newer than a fork wins over the copied field", ops: [
            op(1, .fork, at: 1, publicID: "guide-1"), op(2, .patch, at: 2, data: ["title": "my copy"]),
        ], source: ["title": "the guide"]),
        MergeCase(name: "increments add up on the last whole write", ops: [
            op(1, .upsert, at: 1, data: ["title": "flour", "stock": 10]), increment(2, "stock", by: -1, at: 2),
            increment(3, "stock", by: 5, at: 3, node: "dev-b"),
        ]),
        MergeCase(name: "a whole write overrules the increments older than it, not the newer ones", ops: [
            increment(1, "n", by: 1, at: 1), op(2, .patch, at: 2, data: ["n": 100]), increment(3, "n", by: 2, at: 3, node: "dev-b"),
        ]),
        MergeCase(name: "an increment of a record never written starts from zero", ops: [increment(1, "likes", by: 3, at: 1)]),
        MergeCase(name: "an upsert without the counter resets it for the increments after it", ops: [
            op(1, .upsert, at: 1, data: ["n": 5]), increment(2, "n", by: 1, at: 3), op(3, .upsert, at: 2, data: ["title": "x"]),
        ]),
        MergeCase(name: "a delete newer than every increment leaves a tombstone", ops: [
            increment(1, "n", by: 1, at: 1), increment(2, "n", by: 1, at: 2, node: "dev-b"), op(3, .delete, at: 3),
        ]),
        MergeCase(name: "an increment after a delete resurrects the record with just the counter", ops: [
            op(1, .upsert, at: 1, data: ["title": "a", "n": 4]), op(2, .delete, at: 2), increment(3, "n", by: 1, at: 3),
        ]),
        MergeCase(name: "a counter stays within a double's range", ops: [
            increment(1, "n", by: 1.5e308, at: 1), increment(2, "n", by: 1.5e308, at: 2), increment(3, "m", by: -1.5e308, at: 3),
            increment(4, "m", by: -1.5e308, at: 4),
        ]),
        MergeCase(name: "fractions add in clock order", ops: [
            increment(1, "f", by: 0.1, at: 1), increment(2, "f", by: 0.2, at: 2), increment(3, "f", by: 0.3, at: 3),
        ]),
        MergeCase(name: "an add newer than a remove wins; the base keeps its order", ops: [
            op(1, .upsert, at: 1, data: ["tags": ["a", "b", "e"]]), members(2, .add, "tags", ["c", "d"], at: 2),
            members(3, .remove, "tags", ["a", "c"], at: 3), members(4, .add, "tags", ["a"], at: 4),
        ]),
        MergeCase(name: "a remove newer than an add takes the element out", ops: [
            members(1, .add, "tags", ["x", "y"], at: 1), members(2, .remove, "tags", ["x"], at: 2),
        ]),
        MergeCase(name: "set elements are compared by content", ops: [
            members(1, .add, "crew", [["name": "Ann", "role": "skipper"], 1, .null], at: 1),
            members(2, .remove, "crew", [["role": "skipper", "name": "Ann"], 1.0], at: 2),
        ]),
        MergeCase(name: "a whole write of a set overrules older adds and removes", ops: [
            members(1, .add, "tags", ["x"], at: 1), op(2, .patch, at: 2, data: ["tags": ["y"]]), members(3, .add, "tags", ["z", "y"], at: 3),
        ]),
        MergeCase(name: "a remove of a field never written leaves it absent", ops: [
            op(1, .upsert, at: 1, data: ["title": "a"]), members(2, .remove, "tags", ["x"], at: 2),
        ]),
    ]

    /// A record after `ops`, as every implementation must show it.
    static func outcome(_ ops: [Op], source: [String: JSONValue]?) -> JSONValue {
        var state = RecordState()
        for op in ops {
            if op.type == .fork, let publicID = op.publicID {
                state.fork(source ?? [:], from: publicID, at: op.stamp)
            } else {
                state.apply(op)
            }
        }
        return view(state)
    }

    static func view(_ state: RecordState?) -> JSONValue {
        guard let state, state.isShown else { return ["shown": false] }
        let visibility = state.publicVisibility
        return [
            "shown": true, "deleted": .bool(state.deleted), "data": state.visibleData.map(JSONValue.object) ?? .null,
            "visibility": .string(visibility.rawValue), "public_id": state.shownPublicID.map(JSONValue.string) ?? .null,
            "can_fork": .bool(visibility != .private && state.visibility?.canFork == true),
            "forked_from": state.fork?.publicID.map(JSONValue.string) ?? .null,
        ]
    }

    /// A device's view: the server's record with the device's unconfirmed ops on top.
    struct LocalCase {
        let name: String
        let server: RecordView?
        let ops: [Op]
    }

    static func server(
        version: Int64 = 3, data: [String: JSONValue]?, at ms: Int64, visibility: RecordState.PublicVisibility = .private,
        publicID: String? = nil, canFork: Bool = false, forkedFrom: String? = nil
    ) -> RecordView {
        RecordView(
            collection: "todos", id: "t1", version: version, deleted: data == nil, data: data, hlc: hlc(ms, node: "server"),
            visibility: visibility, publicID: publicID, canFork: canFork, forkedFrom: forkedFrom)
    }

    static let localCases: [LocalCase] = [
        LocalCase(name: "no edits: the server's record", server: server(data: ["title": "a"], at: 1), ops: []),
        LocalCase(name: "a local patch over the server's record", server: server(data: ["title": "a", "n": 1], at: 1), ops: [
            op(1, .patch, at: 2, data: ["n": 2, "title": .null]),
        ]),
        LocalCase(name: "a local upsert over a tombstone", server: server(data: nil, at: 1), ops: [
            op(1, .upsert, at: 2, data: ["title": "again"]),
        ]),
        LocalCase(name: "a local delete, then a local patch", server: server(data: ["title": "a", "n": 1], at: 1), ops: [
            op(1, .delete, at: 2), op(2, .patch, at: 3, data: ["n": 5]),
        ]),
        LocalCase(name: "a local unpublish of a published record", server: server(
            data: ["title": "a"], at: 1, visibility: .public, publicID: "guide-1", canFork: true), ops: [op(1, .unpublish, at: 2)]),
        LocalCase(name: "a local publish, unlisted", server: server(data: ["title": "a"], at: 1), ops: [
            op(1, .publish, at: 2, publicID: "guide-9", canFork: false, listed: false),
        ]),
        LocalCase(name: "a forked record keeps its origin under a local edit", server: server(
            data: ["title": "copy"], at: 1, forkedFrom: "guide-1"), ops: [op(1, .patch, at: 2, data: ["title": "mine"])]),
        LocalCase(name: "a local fork alone shows nothing until the server copies", server: nil, ops: [
            op(1, .fork, at: 1, publicID: "guide-1"),
        ]),
        LocalCase(name: "local edits of a record the server does not have", server: nil, ops: [
            op(1, .upsert, at: 1, data: ["title": "new"]), op(2, .patch, at: 2, data: ["done": true]),
        ]),
        LocalCase(name: "a local increment counts on the server's value", server: server(data: ["n": 5], at: 1), ops: [
            increment(1, "n", by: 2, at: 2), increment(2, "n", by: -1, at: 3),
        ]),
        LocalCase(name: "a local increment older than the server's clock still counts: the server has not had it", server: server(
            data: ["n": 5], at: 9), ops: [increment(1, "n", by: 1, at: 2)]),
        LocalCase(name: "a local whole write, then a local increment", server: server(data: ["n": 5], at: 1), ops: [
            op(1, .patch, at: 2, data: ["n": 0]), increment(2, "n", by: 1, at: 3),
        ]),
        LocalCase(name: "local adds and removes over the server's set", server: server(data: ["tags": ["a", "b"]], at: 5), ops: [
            members(1, .add, "tags", ["c"], at: 2), members(2, .remove, "tags", ["a"], at: 6),
        ]),
        LocalCase(name: "a conditional edit shows at once, whatever its if_version: the server decides", server: server(
            version: 3, data: ["title": "a"], at: 1), ops: [
            op(1, .patch, at: 2, data: ["title": "mine"], ifVersion: 3), op(2, .patch, at: 3, data: ["n": 1], ifVersion: 1),
        ]),
    ]

    /// A job applied by the server, its ops in order, to a stored record: each op's result
    /// and the record after. `if_version` is decided here alone (clients show a conditional
    /// edit at once, as the local cases say, and drop it when the server answers `conflict`).
    struct JobCase {
        let name: String
        /// The stored record before the job (its state from these ops), and its version.
        let stored: (ops: [Op], version: Int64)?
        let ops: [Op]
    }

    static let jobCounter: Int64 = 10

    static let jobCases: [JobCase] = [
        JobCase(name: "if_version equal to the record's version applies", stored: ([op(90, .upsert, at: 1, data: ["title": "a"])], 3), ops: [
            op(1, .patch, at: 2, data: ["done": true], ifVersion: 3),
        ]),
        JobCase(name: "a stale if_version is a conflict and changes nothing", stored: ([op(90, .upsert, at: 1, data: ["title": "a"])], 3), ops: [
            op(1, .patch, at: 2, data: ["title": "lost"], ifVersion: 2),
        ]),
        JobCase(name: "if_version 0 creates a record only where none exists", stored: nil, ops: [
            op(1, .upsert, at: 1, data: ["title": "first"], ifVersion: 0), op(2, .upsert, at: 2, data: ["title": "second"], ifVersion: 0),
        ]),
        JobCase(name: "a tombstone is version 0 to if_version", stored: ([op(90, .upsert, at: 1, data: ["title": "a"]), op(91, .delete, at: 2)], 3), ops: [
            op(1, .upsert, at: 3, data: ["title": "again"], ifVersion: 0),
        ]),
        JobCase(name: "later ops of a job see the versions its earlier ops made", stored: ([op(90, .upsert, at: 1, data: ["title": "a"])], 3), ops: [
            op(1, .patch, at: 2, data: ["n": 1], ifVersion: 3), op(2, .patch, at: 3, data: ["n": 2], ifVersion: 11),
            op(3, .patch, at: 4, data: ["n": 3], ifVersion: 3),
        ]),
        JobCase(name: "an op_id seen before is a duplicate and applies nothing", stored: nil, ops: [
            op(1, .upsert, at: 1, data: ["title": "a"]), op(1, .upsert, at: 2, data: ["title": "again"]),
        ]),
        JobCase(name: "a retried increment counts once", stored: ([op(90, .upsert, at: 1, data: ["n": 1])], 3), ops: [
            increment(1, "n", by: 1, at: 2), increment(1, "n", by: 1, at: 2),
        ]),
        JobCase(name: "an increment on text, or an add on a number, is rejected", stored: ([op(90, .upsert, at: 1, data: ["title": "a", "n": 1])], 3), ops: [
            increment(1, "title", by: 1, at: 2), members(2, .add, "n", ["x"], at: 3), increment(3, "n", by: 1, at: 4),
        ]),
        JobCase(name: "an increment older than the field's last whole write is superseded", stored: ([op(90, .upsert, at: 5, data: ["n": 1])], 3), ops: [
            increment(1, "n", by: 1, at: 2),
        ]),
    ]

    /// Each op's result (status and version) and the record after the job.
    static func jobOutcome(_ job: JobCase) -> JSONValue {
        let key = RecordKey(collection: "todos", id: "t1")
        var records: [RecordKey: StoredRecord] = [:]
        if let stored = job.stored {
            var state = RecordState()
            for op in stored.ops { state.apply(op) }
            records[key] = StoredRecord(key: key, version: stored.version, state: state)
        }
        let outcome = JobApplier.apply(ops: job.ops, records: records, knownOpIDs: [], counter: jobCounter, deviceID: nil)
        return [
            "results": .array(outcome.results.map { result in
                [
                    "op_id": .string(result.opID), "status": .string(result.status.rawValue),
                    "version": result.version.map(JSONValue.int) ?? .null, "reason": result.reason.map(JSONValue.string) ?? .null,
                ]
            }),
            "record": view(outcome.records[key]?.state), "version": outcome.records[key].map { .int($0.version) } ?? .null,
        ]
    }

    /// The device's clock: the send rule (`next`) and the receive rule (`observe`).
    static func clockSteps() -> JSONValue {
        var clock = HLCState(milliseconds: 0, counter: 0)
        var steps: [JSONValue] = []
        func next(_ now: Int64) {
            let stamp = clock.next(now: 1_763_800_000_000 + now, node: "dev-a")
            steps.append(["next": .int(1_763_800_000_000 + now), "expect": .string(stamp.description)])
        }
        func observe(_ text: String) {
            clock.observe(HLC(text)!)
            steps.append(["observe": .string(text)])
        }
        next(10)  // the wall clock leads
        next(10)  // same millisecond: the counter
        next(9)   // the wall clock went back: the clock does not
        observe(hlc(50, 7, node: "server"))  // a pulled clock ahead
        next(20)  // behind it: its millisecond, its counter + 1
        next(60)  // the wall clock leads again
        observe(hlc(30, 0, node: "server"))  // an older one changes nothing
        next(60)
        observe(hlc(100, HLC.maxCounter, node: "server"))
        next(100)  // the counter is full: the next millisecond
        return .array(steps)
    }

    /// A record as a pull carries it.
    static func wire(_ view: RecordView) throws -> JSONValue {
        try JSONParser.parse(try JSONEncoder().encode(view))
    }

    static func text() throws -> String {
        let root: JSONValue = [
            "about": "Generated by Tests/UnitTests/ConformanceVectorTests.swift from SyncModels; do not edit. merge: ops on one record (any order gives expect; a fork copies source; increment, add and remove merge as counters and add-wins sets); local: the server's record with a device's unconfirmed ops on top (an increment, add or remove always counts on the server's value: the server has not had it); clock: a device clock from 0 stepping by next (wall ms) and observe; job: the server applying one job's ops in order to a stored record (its state from stored.ops) with the space's change counter at counter — each op's result and the record after (if_version is decided by the server alone); validation: a write as a client builds it (op, with expand setting values at JSON Pointers: repeat text count times, a number read from text including NaN and ±Infinity, {\"a\": …} nest levels deep around true, or items: the integers from 0, that many) and whether the server refuses it (the op's field, and the limit broken) or takes it (null); date: a date a client writes (write: ms since 1970) as this text, the instant (ms) it reads from a text, and a text as a device shows it in record data (show: date-times in UTC with milliseconds); pull: a pull page in its full form and in its compact form (form=compact: deleted only when true, data only when not deleted, visibility, public_id, can_fork and published_at only while published, forked_from only when set, no updated_at or updated_by, and each hlc ending in the index of its device in the page's devices), which a client reads as the same records less updated_at and updated_by; push_answers: the gateway's answer to a push (status, body, the detail a client reads from it, Retry-After in seconds) for a batch of batch_ops ops (names_space: pushed to a shared space), and what the client does with it (accepted: follow the job; set_aside: the op at op_index, or every op when null, with reason, looking the rules up when rules_version is named; file_missing: upload the file when held, else set the op aside; unknown_device_or_space: pull, then register again; halve_batch; retry: after retry_after seconds or the backoff).",
            "merge": .array(mergeCases.map { merge in
                [
                    "name": .string(merge.name), "ops": .array(merge.ops.map(\.jsonValue)),
                    "source": merge.source.map(JSONValue.object) ?? .null,
                    "expect": outcome(merge.ops, source: merge.source),
                ]
            }),
            "local": .array(try localCases.map { local in
                [
                    "name": .string(local.name), "server": try local.server.map(wire) ?? .null,
                    "ops": .array(local.ops.map(\.jsonValue)), "expect": view(LocalMerge.apply(local.ops, to: local.server)),
                ]
            }),
            "clock": clockSteps(),
            "job": .array(jobCases.map { job in
                [
                    "name": .string(job.name), "counter": .int(jobCounter),
                    "stored": job.stored.map { ["ops": .array($0.ops.map(\.jsonValue)), "version": .int($0.version)] } ?? .null,
                    "ops": .array(job.ops.map(\.jsonValue)), "expect": jobOutcome(job),
                ]
            }),
            "validation": validationVectors,
            "date": dateVectors,
            "pull": pullVectors,
            "push_answers": pushAnswerVectors,
        ]
        let compact = Data(JSONWriter.string(root).utf8)
        let pretty = try JSONSerialization.data(
            withJSONObject: JSONSerialization.jsonObject(with: compact), options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
        return String(decoding: pretty, as: UTF8.self) + "\n"
    }
}
