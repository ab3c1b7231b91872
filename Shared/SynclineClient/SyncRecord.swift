import Foundation
import SyncModels

/// A record type of the app: a `Codable` struct whose `id` is the record's id and whose
/// other properties are its data.
///
/// ```swift
/// struct Recipe: SyncRecord {
///     static let collection = "recipes"
///     var id: String
///     var title: String
///     var minutes: Int
///     var tags: [String] = []
/// }
/// try await client.save(Recipe(id: "r1", title: "Pancakes", minutes: 20))
/// let quick = try await client.fetch(Recipe.self, where: Field("minutes") <= 30, orderBy: [Field("title").ascending])
/// ```
///
/// Declare the record's `CodingKeys` and queries name its fields through them, so a
/// misspelt field does not compile (Swift's own synthesized keys are private to the type):
///
/// ```swift
/// struct Recipe: SyncRecord {
///     enum CodingKeys: String, CodingKey { case id, title, minutes, tags }
///     …
/// }
/// let quick = try await client.fetch(Recipe.self, where: Recipe.field(.minutes) <= 30)
/// ```
///
/// A field that records written earlier (by an older version of the app, or by another
/// client) may lack needs a declared default: Swift's synthesized decoding ignores a
/// property's `= []`, so such a record would not decode. `defaults` is what a missing (or
/// `null`) field reads as; it is not written back unless the app changes it:
///
/// ```swift
/// struct Recipe: SyncRecord {
///     enum CodingKeys: String, CodingKey { case id, title, minutes, tags, servings }
///     static var defaults: KeyValuePairs<CodingKeys, JSONValue> { [.tags: [], .servings: 2] }
///     var id: String
///     var title: String
///     var minutes: Int
///     var tags: [String] = []
///     var servings: Int = 2
/// }
/// ```
///
/// Dates are ISO 8601 strings in UTC with milliseconds (`2026-11-22T09:00:00.123Z`, as the
/// web client's `toISOString()` writes them); a `BlobRef` property is a file reference
/// (`{"$blob": …}`), held back until its file is uploaded. `Double.nan` and infinities are
/// refused at the call (JSON cannot carry them), as is anything else the server would refuse.
public protocol SyncRecord: Codable, Identifiable, Sendable where ID == String {
    /// The collection its records live in.
    static var collection: String { get }
    /// The names of its fields, for `field(_:)`: the record's own `CodingKeys` (declare them
    /// to query by them), or none.
    associatedtype CodingKeys: CodingKey = UndeclaredCodingKeys
    /// What a field the record's data lacks (or holds as `null`) reads as (none by default).
    static var defaults: KeyValuePairs<CodingKeys, JSONValue> { get }
}

extension SyncRecord {
    public static var defaults: KeyValuePairs<CodingKeys, JSONValue> { [:] }

    /// The field `key` names, checked by the compiler: `Recipe.field(.minutes) <= 30`.
    /// `.id` is the record's id.
    public static func field(_ key: CodingKeys) -> Field {
        key.stringValue == "id" ? .id : Field(key.stringValue)
    }
}

/// The field names of a record type that declares no `CodingKeys` of its own (its coding
/// is written by hand): none, so `field(_:)` cannot be called for it; `Field("name")` can.
public enum UndeclaredCodingKeys: CodingKey {
    public var stringValue: String { switch self {} }
    public var intValue: Int? { switch self {} }
    public init?(stringValue: String) { nil }
    public init?(intValue: Int) { nil }
}

/// Between a typed record and a record's data: `id` is the record's id, never a data field.
enum RecordCoding {
    static func data<Record: SyncRecord>(_ record: Record) throws -> [String: JSONValue] {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var text = encoder.singleValueContainer()
            try text.encode(RFC3339.string(from: date))
        }
        let encoded: Data
        do {
            encoded = try encoder.encode(record)
        } catch let EncodingError.invalidValue(value, context) {
            throw ClientError.invalidOp(detail: "data.\(dotted(context.codingPath)): \(value) cannot be sent (\(context.debugDescription))")
        }
        guard var data = try JSONParser.parse(encoded).objectValue else {
            throw ClientError.invalidOp(detail: "\(Record.self) does not encode as a JSON object")
        }
        data["id"] = nil
        return data
    }

    /// A decoder of record data: dates as `data(_:)` writes them (any ISO 8601 offset and
    /// fraction reads). One serves every record of a read.
    static func decoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = RFC3339.date(from: text) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "\(text) is not an ISO 8601 date-time")
            }
            return date
        }
        return decoder
    }

    static func record<Record: SyncRecord>(
        _ type: Record.Type, from local: LocalRecord, using decoder: JSONDecoder = decoder()
    ) throws -> Record {
        var data = local.data
        for (key, value) in Record.defaults where data[key.stringValue] ?? .null == .null { data[key.stringValue] = value }
        data["id"] = .string(local.id)
        do {
            return try decoder.decode(Record.self, from: Data(JSONWriter.string(.object(data)).utf8))
        } catch let error as DecodingError {
            throw ClientError.undecodable(collection: local.collection, id: local.id, detail: describe(error))
        }
    }

    /// The fields to patch so that `old` becomes `new`: changed and added ones with their
    /// value, removed ones as null.
    static func patch(from old: [String: JSONValue], to new: [String: JSONValue]) -> [String: JSONValue] {
        var fields = new.filter { old[$0.key] != $0.value }
        for key in old.keys where new[key] == nil { fields[key] = .null }
        return fields
    }

    static func dotted(_ path: [any CodingKey]) -> String {
        path.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
    }

    static func describe(_ error: DecodingError) -> String {
        switch error {
        case .keyNotFound(let key, let context): return "\(dotted(context.codingPath + [key])) is missing"
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
            return "\(dotted(context.codingPath)): \(context.debugDescription)"
        @unknown default: return "\(error)"
        }
    }
}

/// The typed API: the same writes, reads and observation, in the app's own types.
extension SyncClient {
    /// Stores the record whole (an upsert: fields it no longer has disappear).
    @discardableResult
    public func save<Record: SyncRecord>(_ record: Record, ifVersion: Int64? = nil) throws -> String {
        try upsert(Record.collection, id: record.id, data: try RecordCoding.data(record), ifVersion: ifVersion)
    }

    /// Changes the record in place and sends only the fields that changed (a patch), so a
    /// concurrent edit of another field on another device is kept. Returns the op id, or
    /// nil when the record does not exist or nothing changed.
    @discardableResult
    public func update<Record: SyncRecord>(
        _ type: Record.Type, id: String, ifVersion: Int64? = nil, _ change: @Sendable (inout Record) throws -> Void
    ) throws -> String? {
        guard let local = try store.record(Record.collection, id) else { return nil }
        let original = try RecordCoding.record(Record.self, from: local)
        var record = original
        try change(&record)
        guard record.id == id else { throw ClientError.invalidOp(detail: "update cannot change a record's id") }
        // From the decoded original, not the stored data: fields the type does not know stay out of the patch.
        let fields = RecordCoding.patch(from: try RecordCoding.data(original), to: try RecordCoding.data(record))
        guard !fields.isEmpty else { return nil }
        return try patch(Record.collection, id: id, fields: fields, ifVersion: ifVersion)
    }

    @discardableResult
    public func delete<Record: SyncRecord>(_ record: Record, ifVersion: Int64? = nil) throws -> String {
        try delete(Record.collection, id: record.id, ifVersion: ifVersion)
    }

    @discardableResult
    public func delete<Record: SyncRecord>(_ type: Record.Type, id: String, ifVersion: Int64? = nil) throws -> String {
        try delete(Record.collection, id: id, ifVersion: ifVersion)
    }

    public func fetch<Record: SyncRecord>(_ type: Record.Type, id: String) throws -> Record? {
        try store.record(Record.collection, id).map { try RecordCoding.record(Record.self, from: $0) }
    }

    /// The records the filter keeps, in the given order (then by id). A record whose data
    /// does not decode as `Record` is left out and reported (`SyncEvent.undecodable`), as
    /// `observe` and `LiveQuery` do: one record never hides the others.
    public func fetch<Record: SyncRecord>(
        _ type: Record.Type, where filter: Filter? = nil, orderBy order: [Ordering] = [], limit: Int? = nil, offset: Int = 0
    ) throws -> [Record] {
        decodedRows(Record.self, try records(RecordQuery(Record.collection, where: filter, orderBy: order, limit: limit, offset: offset)))
            .records
    }

    public func count<Record: SyncRecord>(_ type: Record.Type, where filter: Filter? = nil) throws -> Int {
        try count(RecordQuery(Record.collection, where: filter))
    }

    /// Yields the query's records now and whenever they change (see `observe(_:)` for a
    /// `RecordQuery`). A record whose data does not decode as `Record` is left out and
    /// reported (`SyncEvent.undecodable`).
    public func observe<Record: SyncRecord>(
        _ type: Record.Type, where filter: Filter? = nil, orderBy order: [Ordering] = [], limit: Int? = nil, offset: Int = 0
    ) throws -> AsyncStream<[Record]> {
        try observe(RecordQuery(Record.collection, where: filter, orderBy: order, limit: limit, offset: offset)) {
            self.decodedRows(Record.self, $0).records
        }
    }
}
