import PQBridge
import SyncModels

/// One pulled record as PostgreSQL gave it: `data` is the stored JSON text, written into
/// the answer without being parsed (a pull moves many records, often large ones).
public struct PulledChange: Sendable, Equatable {
    public let collection: String
    public let id: String
    public let version: Int64
    public let deleted: Bool
    /// The record's JSON object as stored; nil for a tombstone.
    public let data: String?
    public let updatedAt: String?
    public let updatedBy: String?
    /// The newest clock in the record's state, for the client's HLC receive rule.
    public let hlc: String?
    public let visibility: RecordState.PublicVisibility
    public let publicID: String?
    public let canFork: Bool
    public let publishedAt: String?
    public let forkedFrom: String?

    /// Reads the record from the row's columns `first`…: collection, record_id, version,
    /// deleted, data, updated_at, updated_by, the newest of its stored clocks (`greatest`
    /// in byte order, which is their order), visibility, public_id, can_fork, published_at,
    /// forked_from. Publication shows only while readers can see it.
    init(_ row: PGRows.Row, from first: Int) throws {
        collection = try row.decode(String.self, at: first)
        id = try row.decode(String.self, at: first + 1)
        version = try row.decode(Int64.self, at: first + 2)
        deleted = try row.decode(Bool.self, at: first + 3)
        data = deleted ? nil : try row.decode(PGJSON.self, at: first + 4).text
        // Times are formatted here: `to_char` cost PostgreSQL more than the rest of a
        // page's columns together.
        updatedAt = try row.decode(PGTimestamp?.self, at: first + 5).map(Self.rfc3339)
        updatedBy = try row.decode(String?.self, at: first + 6)
        hlc = try row.decode(String?.self, at: first + 7).flatMap(Stamp.init(stored:))?.hlc
        visibility = try row.decode(String?.self, at: first + 8).flatMap(RecordState.PublicVisibility.init(rawValue:)) ?? .private
        let shown = visibility != .private
        publicID = shown ? try row.decode(String?.self, at: first + 9) : nil
        canFork = shown ? try row.decode(Bool?.self, at: first + 10) ?? false : false
        publishedAt = shown ? try row.decode(PGTimestamp?.self, at: first + 11).map(Self.rfc3339) : nil
        forkedFrom = try row.decode(String?.self, at: first + 12)
    }

    static func rfc3339(_ time: PGTimestamp) -> String {
        RFC3339.utc(unixMicroseconds: time.microseconds + PGTimestamp.unixOffset)
    }

    /// The change as a typed view (tests and tools; the gateway writes `json` instead).
    public func view() throws -> RecordView {
        RecordView(
            collection: collection, id: id, version: version, deleted: deleted,
            data: try data.map { try JSONParser.parse($0).objectValue ?? [:] }, updatedAt: updatedAt, updatedBy: updatedBy,
            hlc: hlc, visibility: visibility, publicID: publicID, canFork: canFork, publishedAt: publishedAt,
            forkedFrom: forkedFrom)
    }

    /// Appends the change's JSON object (the shape of `RecordView`).
    func write(into out: inout [UInt8]) {
        func key(_ name: String, first: Bool = false) {
            if !first { out.append(UInt8(ascii: ",")) }
            JSONWriter.writeString(name, into: &out)
            out.append(UInt8(ascii: ":"))
        }
        func text(_ value: String?) {
            if let value { JSONWriter.writeString(value, into: &out) } else { out.append(contentsOf: Self.null) }
        }
        // RecordView's wire shape, written as bytes: the data is copied, not re-encoded.
        typealias Key = RecordView.CodingKeys
        out.append(UInt8(ascii: "{"))
        key(Key.collection.rawValue, first: true); text(collection)
        key(Key.id.rawValue); text(id)
        key(Key.version.rawValue); out.append(contentsOf: String(version).utf8)
        key(Key.deleted.rawValue); out.append(contentsOf: deleted ? Self.true : Self.false)
        key(Key.data.rawValue); if let data { out.append(contentsOf: data.utf8) } else { out.append(contentsOf: Self.null) }
        if let updatedAt { key(Key.updatedAt.rawValue); text(updatedAt) }
        if let updatedBy { key(Key.updatedBy.rawValue); text(updatedBy) }
        key(Key.hlc.rawValue); text(hlc)
        key(Key.visibility.rawValue); text(visibility.rawValue)
        key(Key.publicID.rawValue); text(publicID)
        key(Key.canFork.rawValue); out.append(contentsOf: canFork ? Self.true : Self.false)
        key(Key.publishedAt.rawValue); text(publishedAt)
        key(Key.forkedFrom.rawValue); text(forkedFrom)
        out.append(UInt8(ascii: "}"))
    }

    private static let null = Array("null".utf8), `true` = Array("true".utf8), `false` = Array("false".utf8)
}

/// One page of a pull: `{"changes":[…],"cursor":"…","has_more":…}`.
public struct PulledPage: Sendable, Equatable {
    public let changes: [PulledChange]
    public let cursor: String
    public let hasMore: Bool

    /// The answer's body, written directly: record data is copied, not re-encoded.
    public var json: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64 + changes.reduce(0) { $0 + 400 + ($1.data?.utf8.count ?? 0) })
        out.append(contentsOf: #"{"changes":["#.utf8)
        for (index, change) in changes.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            change.write(into: &out)
        }
        out.append(contentsOf: #"],"cursor":"#.utf8)
        JSONWriter.writeString(cursor, into: &out)
        out.append(contentsOf: #","has_more":"#.utf8)
        out.append(contentsOf: (hasMore ? "true" : "false").utf8)
        out.append(UInt8(ascii: "}"))
        return out
    }
}
