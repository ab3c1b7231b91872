import Foundation

/// A read of one collection of a space by the app's backend (`POST
/// /v1/service/spaces/{space_id}/query`): the filters, order and page size the clients'
/// queries have, over the records' top-level fields. Validated whole before it reaches
/// PostgreSQL; a wrong query names the JSON Pointer of its first error.
public struct DataQuery: Sendable, Equatable {
    public enum Comparison: String, Sendable, CaseIterable {
        case equal = "=", notEqual = "!=", less = "<", lessOrEqual = "<=", greater = ">", greaterOrEqual = ">="
        /// The field's value is one of `value` (an array).
        case isIn = "in"
        /// A text field holds `value` (case-insensitive), or an array field holds it as an element.
        case contains
        /// The field is missing or null (no `value`).
        case isNull = "is_null"
    }

    public struct Condition: Sendable, Equatable {
        public let field: String
        public let comparison: Comparison
        public let value: JSONValue
    }

    public struct Ordering: Sendable, Equatable {
        public let field: String
        public let descending: Bool
    }

    public let collection: String
    /// All must hold.
    public let conditions: [Condition]
    /// Then by record id, ascending: an order is always total, so pages never repeat or skip.
    public let order: [Ordering]
    public let limit: Int
    /// Where the previous page ended: its order fields' values and record id.
    public let after: [JSONValue]?
    public let includeDeleted: Bool

    public static let maxConditions = 20
    public static let maxOrder = 3
    public static let maxLimit = 1000
    public static let maxInValues = 100

    /// Why a query was refused: where in the body, and what is wrong there.
    public struct Invalid: Error, Sendable, Equatable, CustomStringConvertible {
        public let pointer: String
        public let message: String
        public var description: String { "\(pointer): \(message)" }
    }

    public init(json: JSONValue) throws(Invalid) {
        guard let body = json.objectValue else { throw Invalid(pointer: "", message: "the query must be a JSON object") }
        let known: Set<String> = ["collection", "where", "order", "limit", "cursor", "include_deleted"]
        if let unknown = body.keys.sorted().first(where: { !known.contains($0) }) {
            throw Invalid(pointer: "/\(unknown)", message: "unknown member; a query has \(known.sorted().joined(separator: ", "))")
        }
        guard let collection = body["collection"]?.stringValue, Names.isValidCollection(collection) else {
            throw Invalid(pointer: "/collection", message: "a collection name is required (^[a-z][a-z0-9_]{0,63}$)")
        }
        self.collection = collection
        conditions = try Self.conditions(body["where"])
        order = try Self.order(body["order"])
        switch body["limit"] {
        case nil, .null?: limit = 100
        case let value?:
            guard let number = value.intValue, (1...Int64(Self.maxLimit)).contains(number) else {
                throw Invalid(pointer: "/limit", message: "limit must be an integer from 1 to \(Self.maxLimit)")
            }
            limit = Int(number)
        }
        switch body["include_deleted"] {
        case nil, .null?: includeDeleted = false
        case .bool(let flag)?: includeDeleted = flag
        default: throw Invalid(pointer: "/include_deleted", message: "include_deleted must be true or false")
        }
        switch body["cursor"] {
        case nil, .null?: after = nil
        case .string(let text)?:
            guard let values = Self.decodeCursor(text), values.count == order.count + 1, values.last?.stringValue != nil else {
                throw Invalid(pointer: "/cursor", message: "cursor must be the next_cursor of an earlier page of the same query")
            }
            after = values
        default: throw Invalid(pointer: "/cursor", message: "cursor must be the next_cursor of an earlier page of the same query")
        }
    }

    private static func field(_ value: JSONValue?, at pointer: String) throws(Invalid) -> String {
        guard let name = value?.stringValue, (1...128).contains(name.unicodeScalars.count), Names.isPlainText(name) else {
            throw Invalid(pointer: pointer, message: "a field is the name of a top-level field of the records' data (1 to 128 characters)")
        }
        return name
    }

    private static func conditions(_ value: JSONValue?) throws(Invalid) -> [Condition] {
        guard let value, !value.isNull else { return [] }
        guard let items = value.arrayValue, items.count <= maxConditions else {
            throw Invalid(pointer: "/where", message: "where is an array of at most \(maxConditions) conditions")
        }
        var conditions: [Condition] = []
        for (index, item) in items.enumerated() {
            let at = "/where/\(index)"
            guard let object = item.objectValue, Set(object.keys).isSubset(of: ["field", "op", "value"]) else {
                throw Invalid(pointer: at, message: "a condition is {\"field\", \"op\", \"value\"}")
            }
            let field = try field(object["field"], at: "\(at)/field")
            guard let name = object["op"]?.stringValue, let comparison = Comparison(rawValue: name) else {
                throw Invalid(pointer: "\(at)/op", message: "op must be one of \(Comparison.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            let operand = object["value"]
            switch comparison {
            case .isNull:
                guard operand == nil else { throw Invalid(pointer: "\(at)/value", message: "is_null takes no value") }
            case .isIn:
                guard let values = operand?.arrayValue, values.count <= maxInValues else {
                    throw Invalid(pointer: "\(at)/value", message: "in takes an array of at most \(maxInValues) values")
                }
            default:
                guard operand != nil else { throw Invalid(pointer: "\(at)/value", message: "\(name) needs a value") }
            }
            if let operand, operand.nonFiniteNumberPath("value") != nil || operand.containsNUL || operand.nests(deeperThan: 16) {
                throw Invalid(pointer: "\(at)/value", message: "the value must be plain JSON (finite numbers, no NUL, nesting at most 16)")
            }
            conditions.append(Condition(field: field, comparison: comparison, value: operand ?? .null))
        }
        return conditions
    }

    private static func order(_ value: JSONValue?) throws(Invalid) -> [Ordering] {
        guard let value, !value.isNull else { return [] }
        guard let items = value.arrayValue, items.count <= maxOrder else {
            throw Invalid(pointer: "/order", message: "order is an array of at most \(maxOrder) fields")
        }
        var order: [Ordering] = []
        for (index, item) in items.enumerated() {
            let at = "/order/\(index)"
            guard let object = item.objectValue, Set(object.keys).isSubset(of: ["field", "direction"]) else {
                throw Invalid(pointer: at, message: "an ordering is {\"field\", \"direction\": \"asc\"|\"desc\"}")
            }
            let field = try field(object["field"], at: "\(at)/field")
            let direction = object["direction"].map { $0.stringValue ?? "" } ?? "asc"
            guard direction == "asc" || direction == "desc" else {
                throw Invalid(pointer: "\(at)/direction", message: "direction must be asc or desc")
            }
            order.append(Ordering(field: field, descending: direction == "desc"))
        }
        return order
    }

    /// The cursor after a page's last record: its order fields' values and id, as base64url JSON.
    public static func cursor(after values: [JSONValue]) -> String {
        Data(JSONWriter.bytes(.array(values))).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    static func decodeCursor(_ text: String) -> [JSONValue]? {
        guard text.utf8.count <= 16_384 else { return nil }
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.utf8.count % 4) % 4)
        guard let data = Data(base64Encoded: base64), let value = try? JSONParser.parse(data) else { return nil }
        return value.arrayValue
    }
}

/// A record as the app's backend reads it (the data API, the record feed, exports): its
/// state and who and which job last changed it.
public struct BackendRecord: Encodable, Sendable, Equatable {
    public var spaceID: String
    public var collection: String
    public var id: String
    public var version: Int64
    public var deleted: Bool
    /// nil for a tombstone.
    public var data: JSONValue?
    public var updatedAt: String
    /// The user (or `service:<token id>`) whose job last changed it.
    public var changedBy: String?
    public var jobID: String?

    public init(
        spaceID: String, collection: String, id: String, version: Int64, deleted: Bool, data: JSONValue?, updatedAt: String,
        changedBy: String?, jobID: String?
    ) {
        self.spaceID = spaceID
        self.collection = collection
        self.id = id
        self.version = version
        self.deleted = deleted
        self.data = data
        self.updatedAt = updatedAt
        self.changedBy = changedBy
        self.jobID = jobID
    }

    enum CodingKeys: String, CodingKey {
        case spaceID = "space_id", collection, id, version, deleted, data, updatedAt = "updated_at", changedBy = "changed_by"
        case jobID = "job_id"
    }
}

/// A page of a data query.
public struct BackendRecordPage: Encodable, Sendable, Equatable {
    public var records: [BackendRecord]
    /// The next page's `cursor`; nil on the last page.
    public var nextCursor: String?

    public init(records: [BackendRecord], nextCursor: String?) {
        self.records = records
        self.nextCursor = nextCursor
    }

    enum CodingKeys: String, CodingKey { case records, nextCursor = "next_cursor" }
}
