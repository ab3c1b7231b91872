public enum OpType: String, Codable, Sendable, CaseIterable {
    case upsert, patch, delete, publish, unpublish, fork
    /// Adds `by` to the counter in `field`; `add`/`remove`: `values` into or out of the set
    /// held in the array `field`. They commute with each other and with whole writes.
    case increment, add, remove
    /// A server mutator: the worker asks the collection's hook, and applies what it answers.
    case call
}

/// One operation of a push, as stored in the job row: `hlc` is always set by then
/// (client clock or server stamp), and `rejected` carries an intake-time verdict
/// such as `clock_skew`.
public struct Op: Codable, Sendable, Hashable {
    public var opID: String
    public var type: OpType
    public var collection: String
    public var id: String
    public var data: [String: JSONValue]?
    public var hlc: String?
    public var ifVersion: Int64?
    public var publicID: String?
    public var canFork: Bool?
    /// `publish` only: false publishes the record unlisted (readable by its public id only).
    public var listed: Bool?
    /// `call` only: the mutator's name and its arguments (any JSON).
    public var name: String?
    public var args: JSONValue?
    /// `increment`, `add`, `remove`: the field they change.
    public var field: String?
    /// `increment` only: a finite number.
    public var by: JSONValue?
    /// `add`, `remove`: the elements (any JSON values).
    public var values: [JSONValue]?
    public var rejected: String?

    public init(
        opID: String, type: OpType, collection: String, id: String,
        data: [String: JSONValue]? = nil, hlc: String? = nil, ifVersion: Int64? = nil,
        publicID: String? = nil, canFork: Bool? = nil, listed: Bool? = nil, name: String? = nil, args: JSONValue? = nil,
        field: String? = nil, by: JSONValue? = nil, values: [JSONValue]? = nil, rejected: String? = nil
    ) {
        self.field = field
        self.by = by
        self.values = values
        self.name = name
        self.args = args
        self.opID = opID
        self.type = type
        self.collection = collection
        self.id = id
        self.data = data
        self.hlc = hlc
        self.ifVersion = ifVersion
        self.publicID = publicID
        self.canFork = canFork
        self.listed = listed
        self.rejected = rejected
    }

    enum CodingKeys: String, CodingKey {
        case opID = "op_id", type, collection, id, data, hlc
        case ifVersion = "if_version", publicID = "public_id", canFork = "can_fork", listed, name, args, field, by, values, rejected
    }

    /// The stored form, written without Codable (see `JSONWriter`).
    public var jsonValue: JSONValue {
        var fields: [String: JSONValue] = [
            "op_id": .string(opID), "type": .string(type.rawValue), "collection": .string(collection), "id": .string(id),
        ]
        if let data { fields["data"] = .object(data) }
        if let hlc { fields["hlc"] = .string(hlc) }
        if let ifVersion { fields["if_version"] = .int(ifVersion) }
        if let publicID { fields["public_id"] = .string(publicID) }
        if let canFork { fields["can_fork"] = .bool(canFork) }
        if let listed { fields["listed"] = .bool(listed) }
        if let name { fields["name"] = .string(name) }
        if let args { fields["args"] = args }
        if let field { fields["field"] = .string(field) }
        if let by { fields["by"] = by }
        if let values { fields["values"] = .array(values) }
        if let rejected { fields["rejected"] = .string(rejected) }
        return .object(fields)
    }

    /// Reads the stored form back; nil when it is not an op.
    public init?(stored value: JSONValue) {
        guard let fields = value.objectValue, let opID = fields["op_id"]?.stringValue,
              let type = fields["type"]?.stringValue.flatMap(OpType.init(rawValue:)),
              let collection = fields["collection"]?.stringValue, let id = fields["id"]?.stringValue
        else { return nil }
        self.init(
            opID: opID, type: type, collection: collection, id: id, data: fields["data"]?.objectValue,
            hlc: fields["hlc"]?.stringValue, ifVersion: fields["if_version"]?.intValue,
            publicID: fields["public_id"]?.stringValue, canFork: fields["can_fork"]?.boolValue,
            listed: fields["listed"]?.boolValue, name: fields["name"]?.stringValue, args: fields["args"],
            field: fields["field"]?.stringValue, by: fields["by"], values: fields["values"]?.arrayValue,
            rejected: fields["rejected"]?.stringValue)
    }

    /// Ops as stored in a job row.
    public static func encodeStored(_ ops: [Op]) -> String {
        JSONWriter.string(.array(ops.map(\.jsonValue)))
    }

    public static func decodeStored(_ text: String) -> [Op]? {
        guard case .array(let items)? = try? JSONParser.parse(text) else { return nil }
        let ops = items.compactMap(Op.init(stored:))
        return ops.count == items.count ? ops : nil
    }

    /// The op's position in the merge order; only meaningful once `hlc` is set.
    public var stamp: Stamp { Stamp(hlc: hlc ?? "", opID: opID) }
}

public struct PushRequest: Sendable, Equatable {
    public var deviceID: String
    public var ops: [Op]
    /// The space pushed to; nil: the user's personal space.
    public var spaceID: SpaceID? = nil
}

public enum OpStatus: String, Codable, Sendable {
    case applied, superseded, duplicate, conflict, rejected
}

public struct OpResult: Codable, Sendable, Equatable {
    public var opID: String
    public var status: OpStatus
    public var version: Int64?
    public var reason: String?
    /// A `rule` rejection's rule (`recipes.immutable.kind`).
    public var rule: String?
    public var current: RecordView?

    public init(
        opID: String, status: OpStatus, version: Int64? = nil, reason: String? = nil, rule: String? = nil, current: RecordView? = nil
    ) {
        self.opID = opID
        self.status = status
        self.version = version
        self.reason = reason
        self.rule = rule
        self.current = current
    }

    enum CodingKeys: String, CodingKey {
        case opID = "op_id", status, version, reason, rule, current
    }
}

extension OpResult {
    /// A job's results as the job row stores them: the JSON `JSONCoding` writes (keys sorted,
    /// nil left out) without the op ids — `results[i]` answers the job's `ops[i]`, whose id
    /// the row holds already (a random UUID that would be most of the compressed results).
    /// Written directly: the `Codable` encoder was a seventh of the worker's CPU. A
    /// conflict's `current` record, rare, still goes through `Codable`.
    public static func encodeStored(_ results: [OpResult]) throws -> String {
        var out: [UInt8] = [UInt8(ascii: "[")]
        out.reserveCapacity(results.count * 72)
        var first = true
        for result in results {
            if !first { out.append(UInt8(ascii: ",")) }
            first = false
            out.append(UInt8(ascii: "{"))
            if let current = result.current {
                out += #""current":"#.utf8
                out += try JSONCoding.encode(current)
                out.append(UInt8(ascii: ","))
            }
            if let reason = result.reason {
                out += #""reason":"#.utf8
                JSONWriter.writeString(reason, into: &out)
                out.append(UInt8(ascii: ","))
            }
            if let rule = result.rule {
                out += #""rule":"#.utf8
                JSONWriter.writeString(rule, into: &out)
                out.append(UInt8(ascii: ","))
            }
            out += #""status":"#.utf8
            JSONWriter.writeString(result.status.rawValue, into: &out)
            if let version = result.version {
                out += #","version":"#.utf8
                out += String(version).utf8
            }
            out.append(UInt8(ascii: "}"))
        }
        out.append(UInt8(ascii: "]"))
        return String(decoding: out, as: UTF8.self)
    }

    /// Reads stored results back, each named by the op it answers (`opIDs`: the job's ops'
    /// ids, in order). Results stored with their op ids, as rows written earlier hold them,
    /// keep those.
    public static func decodeStored(_ text: String, opIDs: [String]) throws -> [OpResult] {
        let stored = try JSONCoding.decode([Stored].self, from: text)
        return try stored.enumerated().map { index, result in
            guard let opID = result.opID ?? (index < opIDs.count ? opIDs[index] : nil) else {
                throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "result \(index) answers no op"))
            }
            return OpResult(
                opID: opID, status: result.status, version: result.version, reason: result.reason, rule: result.rule,
                current: result.current)
        }
    }

    /// A result as stored: its op id only in rows written before results left it out.
    private struct Stored: Decodable {
        var opID: String?
        var status: OpStatus
        var version: Int64?
        var reason: String?
        var rule: String?
        var current: RecordView?

        enum CodingKeys: String, CodingKey {
            case opID = "op_id", status, version, reason, rule, current
        }
    }
}

/// Reasons an op is rejected without failing its job.
public enum RejectReason {
    public static let clockSkew = "clock_skew"
    /// The op is no newer than a purged delete and its record no longer exists (honest retention).
    public static let stale = "stale"
    /// A publish names a public id another record holds.
    public static let publicIDTaken = "public_id_taken"
    /// A publish or fork beyond the pusher's budget of ops that name public ids: it was
    /// not looked up. Pushing it again later may apply it.
    public static let rateLimited = "rate_limited"
    /// A fork names a public id that no readable record holds.
    public static let notFound = "not_found"
    /// A fork names a record whose publisher does not let others fork it.
    public static let notForkable = "not_forkable"
    /// The pusher was no longer a member who may write to the space when the job was applied.
    public static let forbidden = "forbidden"
    /// The app's rules refuse the op; the result's `rule` names which.
    public static let rule = "rule"
    /// An increment on a field that holds something other than a number (text, a set).
    public static let notANumber = "not_a_number"
    /// An add or remove on a field that holds something other than an array (a number, a counter).
    public static let notASet = "not_a_set"

    /// A call the app's backend refused (`hook:out_of_stock`, `hook:http_403`), or could
    /// not be asked about (`hook:unanswered`).
    public static func hook(_ reason: String) -> String { "hook:\(reason)" }
}
