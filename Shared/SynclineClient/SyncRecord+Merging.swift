import Foundation
import SyncModels

/// Counters and sets in the app's own types: `client.increment(Recipe.self, id: "r1", \.stock, by: -1)`,
/// `client.add(Recipe.self, id: "r1", \.tags, "quick")`. A key path names no field, so the
/// field is found by changing it on the record this device shows and seeing which field of
/// its data changed: the record must be on the device, and the key path must lead to a
/// top-level field. (`increment(_:id:_:by:)` with a `CodingKeys` case needs neither.)
extension SyncClient {
    @discardableResult
    public func increment<Record: SyncRecord, Number: Numeric & Encodable>(
        _ type: Record.Type, id: String, _ field: WritableKeyPath<Record, Number>, by amount: Number, ifVersion: Int64? = nil
    ) throws -> String {
        let name = try fieldName(Record.self, id: id, "increment") { $0[keyPath: field] += amount == .zero ? 1 : amount }
        return try increment(Record.collection, id: id, field: name, by: try Self.json(amount), ifVersion: ifVersion)
    }

    /// The counter named by its `CodingKeys` case: the record need not be on the device.
    @discardableResult
    public func increment<Record: SyncRecord>(
        _ type: Record.Type, id: String, _ key: Record.CodingKeys, by amount: JSONValue, ifVersion: Int64? = nil
    ) throws -> String {
        try increment(Record.collection, id: id, field: key.stringValue, by: amount, ifVersion: ifVersion)
    }

    @discardableResult
    public func add<Record: SyncRecord, Element: Encodable>(
        _ type: Record.Type, id: String, _ field: WritableKeyPath<Record, [Element]>, _ values: Element..., ifVersion: Int64? = nil
    ) throws -> String {
        try members(.add, of: Record.self, id: id, field, values, ifVersion: ifVersion)
    }

    @discardableResult
    public func remove<Record: SyncRecord, Element: Encodable>(
        _ type: Record.Type, id: String, _ field: WritableKeyPath<Record, [Element]>, _ values: Element..., ifVersion: Int64? = nil
    ) throws -> String {
        try members(.remove, of: Record.self, id: id, field, values, ifVersion: ifVersion)
    }

    /// An add or remove of `values` in the array field `field` names.
    private func members<Record: SyncRecord, Element: Encodable>(
        _ type: OpType, of record: Record.Type, id: String, _ field: WritableKeyPath<Record, [Element]>, _ values: [Element],
        ifVersion: Int64?
    ) throws -> String {
        // Appending changes the field whether or not it holds the values: enough to find its name.
        let name = try fieldName(Record.self, id: id, type.rawValue) { $0[keyPath: field] += values }
        return try write(Op(
            opID: Self.newID(), type: type, collection: Record.collection, id: id, ifVersion: ifVersion, field: name,
            values: try values.map(Self.json)))
    }

    /// The one top-level field of the record's data that `change` changes.
    private func fieldName<Record: SyncRecord>(
        _ type: Record.Type, id: String, _ what: String, change: (inout Record) -> Void
    ) throws -> String {
        guard let local = try store.record(Record.collection, id) else {
            throw ClientError.invalidOp(detail: "\(what) by key path needs \(Record.collection)/\(id) on this device; name the field by its CodingKeys case instead")
        }
        var record = try RecordCoding.record(Record.self, from: local)
        let before = try RecordCoding.data(record)
        change(&record)
        let changed = RecordCoding.patch(from: before, to: try RecordCoding.data(record)).keys
        guard changed.count == 1, let name = changed.first, record.id == id else {
            throw ClientError.invalidOp(detail: "\(what) needs a key path to one top-level field of \(Record.self)")
        }
        return name
    }

    static func json(_ value: some Encodable) throws -> JSONValue {
        try JSONParser.parse(try JSONEncoder().encode(value))
    }
}
