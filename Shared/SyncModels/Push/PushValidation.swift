import Foundation

/// Why a push (or any JSON body) was refused: 400 when it is not JSON, 422 when it
/// breaks the schema or a limit. A refused op is named by its index and a JSON Pointer
/// into the request (`/ops/3/collection`), never only in the text.
public enum ValidationFailure: Error, Equatable, Sendable {
    case notJSON(String)
    case invalid(String, pointer: String? = nil, limit: Int? = nil)
    /// Op `index` of the push; `pointer` is where in the request, `detail` what is wrong.
    case op(index: Int, pointer: String, detail: String, limit: Int? = nil)

    public var detail: String {
        switch self {
        case .notJSON(let detail), .invalid(let detail, _, _), .op(_, _, let detail, _): return detail
        }
    }
}

public enum PushValidation {
    /// Parses and validates a push body. Ops keep the client's `hlc` (possibly nil);
    /// the gateway stamps the rest.
    /// `byService`: the data API's push, which names neither a device nor a space (the
    /// path names the space); the request's `deviceID` is then empty.
    public static func parse(_ body: Data, byService: Bool = false) throws(ValidationFailure) -> PushRequest {
        let root: JSONValue
        do {
            root = try JSONParser.parse(body)
        } catch {
            throw .notJSON("The request body is not valid JSON.")
        }
        guard let object = root.objectValue else { throw .invalid("The body must be a JSON object.") }
        var deviceID = ""
        if byService {
            for name in ["device_id", "space_id"] where object[name] != nil {
                throw .invalid("The data API's push names no \(name): the path names the space.", pointer: "/\(name)")
            }
        } else {
            guard let id = object["device_id"]?.stringValue, !id.isEmpty else {
                throw .invalid("device_id must be a non-empty string.", pointer: "/device_id")
            }
            deviceID = id
        }
        guard case .array(let rawOps)? = object["ops"] else { throw .invalid("ops must be an array.", pointer: "/ops") }
        guard (1...Limits.maxOpsPerPush).contains(rawOps.count) else {
            throw .invalid(
                "ops must hold 1 to \(Limits.maxOpsPerPush) operations, not \(rawOps.count).", pointer: "/ops", limit: Limits.maxOpsPerPush)
        }
        var ops: [Op] = []
        ops.reserveCapacity(rawOps.count)
        for (index, raw) in rawOps.enumerated() {
            do {
                ops.append(try parseOp(raw))
            } catch let problem {
                throw .op(
                    index: index, pointer: "/ops/\(index)" + (problem.field.map { "/" + $0 } ?? ""), detail: problem.text,
                    limit: problem.limit)
            }
        }
        var spaceID: SpaceID?
        if let space = object["space_id"], !space.isNull {
            guard let text = space.stringValue, let id = SpaceID(text) else {
                throw .invalid("space_id must be a UUID.", pointer: "/space_id")
            }
            spaceID = id
        }
        return PushRequest(deviceID: deviceID, ops: ops, spaceID: spaceID)
    }

    /// Checks one op as the gateway would check it in a push — the same rules, so a device
    /// refuses at the call what the server would refuse later — plus what JSON cannot
    /// carry at all (NaN, infinities), which a push could not even encode. `detail` names
    /// the problem without a position in a batch; `pointer` is the op's field (`/data`).
    public static func check(_ op: Op) throws(ValidationFailure) {
        if let data = op.data, let path = JSONValue.object(data).nonFiniteNumberPath("data") {
            throw .invalid("\(path) is not a finite number; JSON has no NaN or infinity", pointer: "/data")
        }
        do {
            _ = try parseOp(op.jsonValue)
        } catch let problem {
            throw .invalid(problem.text, pointer: problem.field.map { "/" + $0 }, limit: problem.limit)
        }
    }

    /// What is wrong with an op: `text`, and the field it is about (a path below the op,
    /// as in a JSON Pointer) and the limit it broke, when there is one.
    struct OpProblem: Error {
        let text: String
        var field: String? = nil
        var limit: Int? = nil
    }

    static func parseOp(_ raw: JSONValue) throws(OpProblem) -> Op {
        guard let fields = raw.objectValue else { throw OpProblem(text: "an op must be an object") }
        guard let rawOpID = fields["op_id"]?.stringValue, let opID = Names.canonicalUUID(rawOpID) else {
            throw OpProblem(text: "op_id must be a UUID", field: "op_id")
        }
        guard let typeText = fields["type"]?.stringValue else { throw OpProblem(text: "type must be a string", field: "type") }
        guard let type = OpType(rawValue: typeText) else {
            throw OpProblem(text: "unknown type '\(typeText)'", field: "type")
        }
        guard let collection = fields["collection"]?.stringValue, Names.isValidCollection(collection) else {
            throw OpProblem(text: "collection must match ^[a-z][a-z0-9_]{0,63}$", field: "collection")
        }
        guard let id = fields["id"]?.stringValue, Names.isValidRecordID(id) else {
            throw OpProblem(text: "id must match ^[A-Za-z0-9_.:-]{1,128}$", field: "id")
        }
        var op = Op(opID: opID, type: type, collection: collection, id: id)

        if let hlc = fields["hlc"], !hlc.isNull {
            guard let text = hlc.stringValue, HLC(text) != nil else {
                throw OpProblem(text: "hlc must look like <13-digit ms>-<5-digit counter>-<device_id>", field: "hlc")
            }
            op.hlc = text
        }
        if let ifVersion = fields["if_version"], !ifVersion.isNull {
            // One bound whether the number arrives as 42 or 42.0 (a double is an exact
            // integer only below 9e15), as the OpenAPI document says.
            guard let version = ifVersion.intValue, (0..<Limits.maxIfVersion).contains(version) else {
                throw OpProblem(text: "if_version must be an integer from 0 to \(Limits.maxIfVersion - 1)", field: "if_version")
            }
            op.ifVersion = version
        }

        switch type {
        case .upsert, .patch:
            op.data = try data(fields["data"], of: type)
        case .delete, .unpublish:
            if let data = fields["data"], !data.isNull { throw OpProblem(text: "\(type.rawValue) takes no data", field: "data") }
        case .publish, .fork:
            if let data = fields["data"], !data.isNull { throw OpProblem(text: "\(type.rawValue) takes no data", field: "data") }
            guard let publicID = fields["public_id"]?.stringValue, Names.isValidPublicID(publicID) else {
                throw OpProblem(text: "public_id must match ^[a-z0-9][a-z0-9-]{2,127}$", field: "public_id")
            }
            op.publicID = publicID
            guard type == .publish else { break }
            op.canFork = try optionalBool(fields, "can_fork")
            op.listed = try optionalBool(fields, "listed")
        case .call:
            if let data = fields["data"], !data.isNull { throw OpProblem(text: "call takes no data; its arguments are args", field: "data") }
            guard let name = fields["name"]?.stringValue, Names.isValidCallName(name) else {
                throw OpProblem(text: "name must match ^[A-Za-z][A-Za-z0-9_.:-]{0,63}$", field: "name")
            }
            op.name = name
            let args = fields["args"] ?? .null
            if args.containsNUL { throw OpProblem(text: "args must not contain the NUL character (\\u0000)", field: "args") }
            if args.nests(deeperThan: Limits.maxDataDepth) {
                throw OpProblem(
                    text: "args nest more than \(Limits.maxDataDepth) levels of objects and arrays", field: "args", limit: Limits.maxDataDepth)
            }
            let size = JSONWriter.bytes(args).count
            guard size <= Limits.maxDataBytes else {
                throw OpProblem(text: "args are \(size) bytes, more than \(Limits.maxDataBytes)", field: "args", limit: Limits.maxDataBytes)
            }
            op.args = args
        case .increment, .add, .remove:
            if let data = fields["data"], !data.isNull {
                throw OpProblem(text: "\(type.rawValue) takes no data; it names a field", field: "data")
            }
            op.field = try mergedField(fields["field"])
            if type == .increment {
                // A number as JSON writes it: 1, -2.5, 1e3. Text, or a number JSON cannot
                // hold (a client's NaN), is refused.
                guard let by = fields["by"], let amount = by.numberValue, amount.isFinite else {
                    throw OpProblem(text: "by must be a finite number", field: "by")
                }
                op.by = by
            } else {
                op.values = try setValues(fields["values"])
            }
        }
        return op
    }

    /// The field an increment, add or remove changes: a name of 1 to 256 characters without NUL.
    static func mergedField(_ raw: JSONValue?) throws(OpProblem) -> String {
        guard let name = raw?.stringValue, !name.isEmpty, !name.utf8.contains(0) else {
            throw OpProblem(text: "field must name a field: a non-empty string without NUL", field: "field")
        }
        guard name.unicodeScalars.count <= Limits.maxFieldNameLength else {
            throw OpProblem(
                text: "field is longer than \(Limits.maxFieldNameLength) characters", field: "field", limit: Limits.maxFieldNameLength)
        }
        return name
    }

    /// An add's or remove's elements: 1 to 1,000 JSON values, within the data's limits.
    static func setValues(_ raw: JSONValue?) throws(OpProblem) -> [JSONValue] {
        guard let values = raw?.arrayValue else { throw OpProblem(text: "values must be an array", field: "values") }
        guard (1...Limits.maxSetValues).contains(values.count) else {
            throw OpProblem(
                text: "values must hold 1 to \(Limits.maxSetValues) elements, not \(values.count)", field: "values",
                limit: Limits.maxSetValues)
        }
        let all = JSONValue.array(values)
        if let path = all.nonFiniteNumberPath("values") {
            throw OpProblem(text: "\(path) is not a finite number", field: "values")
        }
        if all.containsNUL { throw OpProblem(text: "values must not contain the NUL character (\\u0000)", field: "values") }
        // A file is referenced from a field a patch sets: the push then checks it is there.
        if all.holdsBlobKey {
            throw OpProblem(text: "values must not hold file references ({\"$blob\": …}); set a file with a patch", field: "values")
        }
        if all.nests(deeperThan: Limits.maxDataDepth) {
            throw OpProblem(
                text: "values nest more than \(Limits.maxDataDepth) levels of objects and arrays", field: "values",
                limit: Limits.maxDataDepth)
        }
        let size = JSONWriter.bytes(all).count
        guard size <= Limits.maxDataBytes else {
            throw OpProblem(text: "values are \(size) bytes, more than \(Limits.maxDataBytes)", field: "values", limit: Limits.maxDataBytes)
        }
        return values
    }

    /// An upsert's or a patch's `data`: an object (not empty for a patch) within the depth
    /// and size limits, without NUL, whose file references are well formed.
    static func data(_ raw: JSONValue?, of type: OpType) throws(OpProblem) -> [String: JSONValue] {
        guard let data = raw?.objectValue else { throw OpProblem(text: "data must be an object", field: "data") }
        if type == .patch && data.isEmpty { throw OpProblem(text: "a patch needs at least one field", field: "data") }
        if JSONValue.object(data).containsNUL {
            throw OpProblem(text: "data must not contain the NUL character (\\u0000)", field: "data")
        }
        if JSONValue.object(data).nests(deeperThan: Limits.maxDataDepth) {
            throw OpProblem(
                text: "data nests more than \(Limits.maxDataDepth) levels of objects and arrays", field: "data", limit: Limits.maxDataDepth)
        }
        if let path = JSONValue.object(data).malformedBlobReferencePath("data") {
            throw OpProblem(
                text: "\(path) must be a file reference: {\"sha256\": 64 lowercase hex digits, \"size\": bytes, \"content_type\": a media type}, alone in its object",
                field: "data")
        }
        let size = JSONWriter.bytes(.object(data)).count
        guard size <= Limits.maxDataBytes else {
            throw OpProblem(text: "data is \(size) bytes, more than \(Limits.maxDataBytes)", field: "data", limit: Limits.maxDataBytes)
        }
        return data
    }

    static func optionalBool(_ fields: [String: JSONValue], _ name: String) throws(OpProblem) -> Bool? {
        guard let value = fields[name], !value.isNull else { return nil }
        guard let flag = value.boolValue else { throw OpProblem(text: "\(name) must be a boolean", field: name) }
        return flag
    }
}
