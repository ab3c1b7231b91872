import Foundation
import SyncModels

/// A Swift value a filter compares a field with, as it is stored in record data:
/// `Field("minutes") <= maximum` with `maximum: Int`, `Field("cookedAt") > date` with a
/// `Date`. `JSONValue` is one too, for `.null` and values built by hand.
public protocol QueryValue: Sendable {
    var queryValue: JSONValue { get }
}

extension JSONValue: QueryValue { public var queryValue: JSONValue { self } }
extension Int: QueryValue { public var queryValue: JSONValue { .int(Int64(self)) } }
extension Int64: QueryValue { public var queryValue: JSONValue { .int(self) } }
extension Int32: QueryValue { public var queryValue: JSONValue { .int(Int64(self)) } }
extension Double: QueryValue { public var queryValue: JSONValue { .double(self) } }
extension String: QueryValue { public var queryValue: JSONValue { .string(self) } }
extension Bool: QueryValue { public var queryValue: JSONValue { .bool(self) } }
/// A date as typed records store it (UTC with milliseconds), so comparisons order by time.
extension Date: QueryValue { public var queryValue: JSONValue { .string(RFC3339.string(from: self)) } }
/// `nil` is `null` (a missing field matches it too).
extension Optional: QueryValue where Wrapped: QueryValue { public var queryValue: JSONValue { self?.queryValue ?? .null } }

/// A field of a record's data, by name; `"a.b"` reaches into a nested object. `Field.id` is
/// the record's id.
///
/// Values compare as SQLite compares them: `null` (or a missing field) before numbers,
/// numbers (integers and doubles alike) before strings, strings by their UTF-8 bytes;
/// `true` and `false` are 1 and 0. A comparison with a missing or `null` field is false.
public struct Field: Sendable, Hashable, CustomStringConvertible {
    public let name: String
    let isRecordID: Bool

    public init(_ name: String) {
        self.name = name
        isRecordID = false
    }

    /// The field a `CodingKey` names: `Field(Recipe.CodingKeys.title)`. (`Recipe.field(.title)`
    /// says the same, taking only `Recipe`'s keys.)
    public init(_ key: some CodingKey) { self.init(key.stringValue) }

    /// A field inside this one's object value: `Recipe.field(.source).appending(Source.CodingKeys.url)`
    /// is `"source.url"`.
    public func appending(_ key: some CodingKey) -> Field { Field("\(name).\(key.stringValue)") }

    /// The record's id.
    public static let id = Field(recordID: ())

    private init(recordID: Void) {
        name = "id"
        isRecordID = true
    }

    public var description: String { isRecordID ? "id" : name }

    public static func == (field: Field, value: JSONValue) -> Filter {
        value == .null ? .isNull(field) : .compare(field, .equal, value)
    }
    public static func != (field: Field, value: JSONValue) -> Filter {
        value == .null ? .not(.isNull(field)) : .compare(field, .notEqual, value)
    }
    public static func < (field: Field, value: JSONValue) -> Filter { .compare(field, .less, value) }
    public static func <= (field: Field, value: JSONValue) -> Filter { .compare(field, .lessOrEqual, value) }
    public static func > (field: Field, value: JSONValue) -> Filter { .compare(field, .greater, value) }
    public static func >= (field: Field, value: JSONValue) -> Filter { .compare(field, .greaterOrEqual, value) }

    public static func == (field: Field, value: some QueryValue) -> Filter { field == value.queryValue }
    public static func != (field: Field, value: some QueryValue) -> Filter { field != value.queryValue }
    public static func < (field: Field, value: some QueryValue) -> Filter { field < value.queryValue }
    public static func <= (field: Field, value: some QueryValue) -> Filter { field <= value.queryValue }
    public static func > (field: Field, value: some QueryValue) -> Filter { field > value.queryValue }
    public static func >= (field: Field, value: some QueryValue) -> Filter { field >= value.queryValue }

    /// The field equals one of `values`.
    public func isIn(_ values: [JSONValue]) -> Filter { .isIn(self, values) }
    public func isIn(_ values: [some QueryValue]) -> Filter { .isIn(self, values.map(\.queryValue)) }
    /// A string field contains `value` as a substring, whatever the case of either (what a
    /// search field wants: `"pan"` finds "Pancakes" and "PAN"), or an array field holds
    /// `value` exactly. Case is folded by Unicode's lowercase mapping, as the web client's
    /// `contains` folds it.
    public func contains(_ value: JSONValue) -> Filter { .contains(self, value) }
    public func contains(_ value: some QueryValue) -> Filter { .contains(self, value.queryValue) }
    /// A string field starts with `prefix`, whatever the case of either (the web client's
    /// `startsWith`).
    public func hasPrefix(_ prefix: String) -> Filter { .hasPrefix(self, prefix) }
    /// The field is `null` or missing.
    public var isNull: Filter { .isNull(self) }

    public var ascending: Ordering { Ordering(field: self, descending: false) }
    public var descending: Ordering { Ordering(field: self, descending: true) }
}

/// Which records a query keeps. Combine with `&&`, `||` and `!`.
public indirect enum Filter: Sendable, Equatable {
    public enum Comparison: String, Sendable {
        case equal = "=", notEqual = "<>", less = "<", lessOrEqual = "<=", greater = ">", greaterOrEqual = ">="
    }

    case compare(Field, Comparison, JSONValue)
    case isIn(Field, [JSONValue])
    case contains(Field, JSONValue)
    case hasPrefix(Field, String)
    case isNull(Field)
    case and([Filter])
    case or([Filter])
    case not(Filter)

    public static func && (lhs: Filter, rhs: Filter) -> Filter { .and([lhs, rhs]) }
    public static func || (lhs: Filter, rhs: Filter) -> Filter { .or([lhs, rhs]) }
    public static prefix func ! (filter: Filter) -> Filter { .not(filter) }
}

/// One key of a query's order; ties are always broken by record id.
public struct Ordering: Sendable, Equatable {
    public let field: Field
    public let descending: Bool
}

/// A query over one collection's records as this device shows them (deleted ones never).
public struct RecordQuery: Sendable, Equatable {
    public var collection: String
    public var filter: Filter?
    public var order: [Ordering]
    public var limit: Int?
    public var offset: Int

    public init(_ collection: String, where filter: Filter? = nil, orderBy order: [Ordering] = [], limit: Int? = nil, offset: Int = 0) {
        self.collection = collection
        self.filter = filter
        self.order = order
        self.limit = limit
        self.offset = offset
    }
}

/// An index the app declares on fields of a collection's records, so that queries filtering
/// or ordering on them do not scan the collection. Declared in `ClientConfiguration.indexes`;
/// indexes no longer declared are dropped when the store opens.
public struct LocalIndex: Sendable, Hashable {
    public let collection: String
    public let fields: [Field]

    public init(_ collection: String, on fields: [Field]) {
        self.collection = collection
        self.fields = fields
    }

    public init(_ collection: String, on fields: String...) {
        self.init(collection, on: fields.map(Field.init))
    }

    /// An index on fields of a record type, named by its `CodingKeys`:
    /// `LocalIndex(Recipe.self, on: .minutes, .title)`.
    public init<Record: SyncRecord>(_ type: Record.Type, on keys: Record.CodingKeys...) {
        self.init(Record.collection, on: keys.map(Record.field))
    }
}
