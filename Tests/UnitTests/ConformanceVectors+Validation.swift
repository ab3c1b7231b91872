import Foundation
@testable import SyncModels

/// Writes every client can build, and whether the server refuses them: the clients refuse
/// at the call exactly these, naming the same field of the op.
extension ConformanceVectors {
    /// An op as a client's write builds it, before `expand` sets values the vectors file
    /// cannot hold or should not spell out (pointer → spec):
    /// - `{"repeat": text, "count": n}`: `text` n times;
    /// - `{"number": text}`: the number `text` reads as, including `NaN`, `Infinity` and
    ///   `-Infinity`; `text` is how JSON carries it from a client (as JavaScript writes it);
    /// - `{"nest": n}`: `{"a": …}` n levels deep around `true`;
    /// - `{"items": n}`: an array of the integers 0 to n - 1.
    struct ValidationCase {
        let name: String
        let op: JSONValue
        var expand: [String: JSONValue] = [:]
    }

    static func write(_ type: OpType, _ collection: String = "todos", _ id: String = "t1", data: JSONValue? = nil, publicID: String? = nil, ifVersion: JSONValue? = nil) -> JSONValue {
        var fields: [String: JSONValue] = [
            "op_id": .string(opID(1)), "type": .string(type.rawValue), "collection": .string(collection), "id": .string(id),
        ]
        if let data { fields["data"] = data }
        if let publicID { fields["public_id"] = .string(publicID) }
        if let ifVersion { fields["if_version"] = ifVersion }
        return .object(fields)
    }

    /// An increment, add or remove of `field` (nil: none), as a client builds it.
    static func merging(_ type: OpType, field: String? = "stock", by: JSONValue? = nil, values: JSONValue? = nil, data: JSONValue? = nil) -> JSONValue {
        var op = write(type, data: data).objectValue!
        if let field { op["field"] = .string(field) }
        if let by { op["by"] = by }
        if let values { op["values"] = values }
        return .object(op)
    }

    static func repeated(_ text: String, _ count: Int) -> JSONValue { ["repeat": .string(text), "count": .int(Int64(count))] }
    static func number(_ text: String) -> JSONValue { ["number": .string(text)] }

    /// A string of "x" at `/data/t` that takes `data` (with `t` empty) to `bytes` as the server counts them.
    static func padded(_ data: [String: JSONValue], expand: [String: JSONValue] = [:], toBytes bytes: Int) -> [String: JSONValue] {
        var empty = data
        empty["t"] = ""
        let base = JSONWriter.bytes(expanded(write(.upsert, data: .object(empty)), expand)["data"]!).count
        return expand.merging(["/data/t": repeated("x", bytes - base)]) { $1 }
    }

    static let limit = Limits.maxDataBytes
    static let sha = String(repeating: "ab", count: 32)

    static let validationCases: [ValidationCase] = [
        ValidationCase(name: "an upsert of plain values", op: write(.upsert, data: ["title": "a", "n": 1.5, "done": false, "tags": ["x", .null], "at": ["h": 9]])),
        ValidationCase(name: "a patch, and null removing a field", op: write(.patch, data: ["note": .null])),
        ValidationCase(name: "a patch with no field", op: write(.patch, data: [:])),
        ValidationCase(name: "data that is not an object", op: write(.upsert, data: ["a", "b"])),
        ValidationCase(name: "a delete", op: write(.delete)),
        ValidationCase(name: "the longest collection name", op: write(.upsert, "a" + String(repeating: "b_9", count: 21), data: ["a": 1])),
        ValidationCase(name: "a collection name one too long", op: write(.upsert, "a" + String(repeating: "b_9", count: 21) + "c", data: ["a": 1])),
        ValidationCase(name: "a collection name with a capital", op: write(.upsert, "Recipes", data: ["a": 1])),
        ValidationCase(name: "a collection name with a dash", op: write(.upsert, "my-items", data: ["a": 1])),
        ValidationCase(name: "a collection name starting with a digit", op: write(.upsert, "1items", data: ["a": 1])),
        ValidationCase(name: "an empty collection name", op: write(.upsert, "", data: ["a": 1])),
        ValidationCase(name: "the longest id, of every allowed character", op: write(.upsert, "todos", "Az09_.:-" + String(repeating: "z", count: 120), data: ["a": 1])),
        ValidationCase(name: "an id one too long", op: write(.upsert, "todos", String(repeating: "z", count: 129), data: ["a": 1])),
        ValidationCase(name: "an id with a slash", op: write(.upsert, "todos", "a/b", data: ["a": 1])),
        ValidationCase(name: "an id with a space", op: write(.upsert, "todos", "a b", data: ["a": 1])),
        ValidationCase(name: "an id beyond ASCII", op: write(.upsert, "todos", "café", data: ["a": 1])),
        ValidationCase(name: "an empty id", op: write(.upsert, "todos", "", data: ["a": 1])),
        ValidationCase(name: "a public id", op: write(.publish, publicID: "my-list-2")),
        ValidationCase(name: "a public id with spaces and capitals", op: write(.publish, publicID: "No Spaces")),
        ValidationCase(name: "a public id too short", op: write(.fork, publicID: "ab")),
        ValidationCase(name: "a public id starting with a dash", op: write(.publish, publicID: "-abc")),
        ValidationCase(name: "if_version 0", op: write(.upsert, data: ["a": 1], ifVersion: 0)),
        ValidationCase(name: "a negative if_version", op: write(.patch, data: ["a": 1], ifVersion: -1)),
        ValidationCase(name: "an if_version that is not an integer", op: write(.patch, data: ["a": 1], ifVersion: 1.5)),
        ValidationCase(name: "an if_version past the largest", op: write(.delete, ifVersion: .int(Limits.maxIfVersion))),
        ValidationCase(name: "NaN in data", op: write(.upsert, data: ["title": "a"]), expand: ["/data/rating": number("NaN")]),
        ValidationCase(name: "Infinity deep in a patch", op: write(.patch, data: ["stats": ["best": 1]]), expand: ["/data/stats/worst": number("Infinity")]),
        ValidationCase(name: "-Infinity in data", op: write(.upsert, data: ["title": "a"]), expand: ["/data/low": number("-Infinity")]),
        ValidationCase(name: "NUL in a value", op: write(.upsert, data: ["title": "a\u{0}b"])),
        ValidationCase(name: "NUL in a field name", op: write(.patch, data: ["a\u{0}b": 1])),
        ValidationCase(name: "data nested to the deepest", op: write(.upsert, data: ["title": "a"]), expand: ["/data/deep": ["nest": .int(Int64(Limits.maxDataDepth - 1))]]),
        ValidationCase(name: "data nested one level too deep", op: write(.upsert, data: ["title": "a"]), expand: ["/data/deep": ["nest": .int(Int64(Limits.maxDataDepth))]]),
        ValidationCase(name: "a file reference", op: write(.upsert, data: ["photo": BlobReference(sha256: sha, size: 10, contentType: "image/jpeg").json])),
        ValidationCase(name: "a file reference with a short hash", op: write(.upsert, data: ["photo": ["$blob": ["sha256": "abc", "size": 10, "content_type": "image/jpeg"]]])),
        ValidationCase(name: "a file reference beside another field", op: write(.upsert, data: ["photo": ["$blob": ["sha256": .string(sha), "size": 10, "content_type": "image/jpeg"], "alt": "x"]])),
        ValidationCase(name: "a file reference with a bad content type", op: write(.patch, data: ["files": [["$blob": ["sha256": .string(sha), "size": 10, "content_type": "jpeg"]]]])),
        ValidationCase(name: "a file reference with a negative size", op: write(.upsert, data: ["photo": ["$blob": ["sha256": .string(sha), "size": -1, "content_type": "image/png"]]])),
        ValidationCase(name: "an increment by a whole number", op: merging(.increment, by: -1)),
        ValidationCase(name: "an increment by a fraction", op: merging(.increment, by: 0.25)),
        ValidationCase(name: "an increment by text", op: merging(.increment, by: "1")),
        ValidationCase(name: "an increment by nothing", op: merging(.increment)),
        ValidationCase(name: "an increment by NaN", op: merging(.increment, by: 1), expand: ["/by": number("NaN")]),
        ValidationCase(name: "an increment by Infinity", op: merging(.increment, by: 1), expand: ["/by": number("-Infinity")]),
        ValidationCase(name: "an increment of no field", op: merging(.increment, field: nil, by: 1)),
        ValidationCase(name: "an increment of an empty field name", op: merging(.increment, field: "", by: 1)),
        ValidationCase(name: "an increment with data", op: merging(.increment, by: 1, data: ["stock": 1])),
        ValidationCase(name: "a field name of the longest length", op: merging(.increment, field: String(repeating: "é", count: Limits.maxFieldNameLength), by: 1)),
        ValidationCase(name: "a field name one too long", op: merging(.add, field: String(repeating: "f", count: Limits.maxFieldNameLength + 1), values: ["a"])),
        ValidationCase(name: "a field name with NUL", op: merging(.remove, field: "a\u{0}b", values: ["a"])),
        ValidationCase(name: "an add of JSON values of every kind", op: merging(.add, field: "tags", values: ["quick", 1, 2.5, true, .null, ["a"], ["k": "v"]])),
        ValidationCase(name: "an add of no value", op: merging(.add, field: "tags", values: [])),
        ValidationCase(name: "an add whose values are no array", op: merging(.add, field: "tags", values: "quick")),
        ValidationCase(name: "a remove of the most values", op: merging(.remove, field: "tags", values: []), expand: ["/values": ["items": .int(Int64(Limits.maxSetValues))]]),
        ValidationCase(name: "an add of 10,000 values", op: merging(.add, field: "tags", values: []), expand: ["/values": ["items": 10_000]]),
        ValidationCase(name: "NaN among an add's values", op: merging(.add, field: "tags", values: ["a"]), expand: ["/values/1": number("NaN")]),
        ValidationCase(name: "NUL in an add's value", op: merging(.add, field: "tags", values: ["a\u{0}"])),
        ValidationCase(name: "a file reference among an add's values", op: merging(.add, field: "files", values: [BlobReference(sha256: sha, size: 10, contentType: "image/jpeg").json])),
        ValidationCase(name: "the text $blob among an add's values", op: merging(.add, field: "tags", values: ["$blob", ["note": "$blob"]])),
        ValidationCase(name: "an add with data", op: merging(.add, field: "tags", values: ["a"], data: ["tags": ["a"]])),
        ValidationCase(name: "data of exactly the limit", op: write(.upsert, data: ["a": 1]), expand: padded(["a": 1], toBytes: limit)),
        ValidationCase(name: "data one byte over the limit", op: write(.upsert, data: ["a": 1]), expand: padded(["a": 1], toBytes: limit + 1)),
        ValidationCase(name: "data at the limit in two-byte characters", op: write(.patch, data: ["a": 1]), expand: padded(["a": 1], expand: ["/data/b": repeated("é", 100_000)], toBytes: limit)),
        ValidationCase(name: "data over the limit in four-byte characters", op: write(.patch, data: ["a": 1]), expand: padded(["a": 1], expand: ["/data/b": repeated("🧭", 50_000)], toBytes: limit + 1)),
        ValidationCase(name: "control characters count as their escapes", op: write(.upsert, data: ["a": 1]), expand: padded(["a": 1], expand: ["/data/b": repeated("\u{8}\n\u{1f}", 10_000)], toBytes: limit + 1)),
        ValidationCase(name: "a quote and a backslash count as their escapes", op: write(.upsert, data: ["a": 1]), expand: padded(["a": 1], expand: ["/data/b": repeated("\"\\", 10_000)], toBytes: limit)),
        ValidationCase(name: "a tiny number counts as the server writes it", op: write(.upsert, data: ["a": 1]), expand: padded(["a": 1], expand: ["/data/n": number("1e-7")], toBytes: limit + 1)),
        ValidationCase(name: "a small number counts as the server writes it", op: write(.upsert, data: ["a": 1]), expand: padded(["a": 1], expand: ["/data/n": number("0.00001")], toBytes: limit)),
        ValidationCase(name: "a huge number counts as the server writes it", op: write(.upsert, data: ["a": 1]), expand: padded(["a": 1], expand: ["/data/n": number("1.5e+300"), "/data/m": number("10000000000000000000")], toBytes: limit)),
        ValidationCase(name: "whole and fractional numbers count as the server writes them", op: write(.upsert, data: ["a": 1]), expand: padded(["a": 1], expand: ["/data/n": number("123456789012345.6"), "/data/m": number("10000000000000000"), "/data/k": number("1e+21")], toBytes: limit)),
    ]

    /// The op with its expansions set.
    static func expanded(_ op: JSONValue, _ expand: [String: JSONValue]) -> JSONValue {
        var op = op
        for (pointer, spec) in expand {
            let value: JSONValue
            if let text = spec["repeat"]?.stringValue, let count = spec["count"]?.intValue {
                value = .string(String(repeating: text, count: Int(count)))
            } else if let text = spec["number"]?.stringValue {
                value = ["NaN": .double(.nan), "Infinity": .double(.infinity), "-Infinity": .double(-.infinity)][text]
                    ?? (try! JSONParser.parse(text))
            } else if let count = spec["items"]?.intValue {
                value = .array((0..<count).map { .int($0) })
            } else {
                value = (0..<Int(spec["nest"]!.intValue!)).reduce(JSONValue.bool(true)) { inner, _ in ["a": inner] }
            }
            op = op.setting(value, at: pointer.split(separator: "/").map(String.init))
        }
        return op
    }

    /// What the server makes of the op: nil when it takes it, else the op's field it names and the limit broken.
    static func refusal(_ op: JSONValue) -> JSONValue {
        do throws(ValidationFailure) {
            let parsed: Op
            do {
                parsed = try PushValidation.parseOp(op)
            } catch let problem {
                throw .invalid(problem.text, pointer: problem.field.map { "/" + $0 }, limit: problem.limit)
            }
            try PushValidation.check(parsed)
            return .null
        } catch {
            guard case .invalid(_, let pointer, let limit) = error else { return .string("unexpected \(error)") }
            return ["field": pointer.map { .string(String($0.dropFirst())) } ?? .null, "limit": limit.map { .int(Int64($0)) } ?? .null]
        }
    }

    static var validationVectors: JSONValue {
        .array(validationCases.map { validation in
            [
                "name": .string(validation.name), "op": validation.op, "expand": .object(validation.expand),
                "refused": refusal(expanded(validation.op, validation.expand)),
            ]
        })
    }
}

extension JSONValue {
    subscript(key: String) -> JSONValue? { objectValue?[key] }

    /// This value with `value` at `path` (object keys), objects made on the way.
    func setting(_ value: JSONValue, at path: [String]) -> JSONValue {
        guard let key = path.first else { return value }
        if var items = arrayValue, let index = Int(key) {
            while items.count <= index { items.append(.null) }
            items[index] = items[index].setting(value, at: Array(path.dropFirst()))
            return .array(items)
        }
        var fields = objectValue ?? [:]
        fields[key] = (fields[key] ?? .object([:])).setting(value, at: Array(path.dropFirst()))
        return .object(fields)
    }
}
