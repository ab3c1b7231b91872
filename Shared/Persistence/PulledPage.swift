import Foundation
import PQBridge
import SyncModels

/// One page of a pull, `{"changes":[…],"cursor":"…","has_more":…}`, as the gateway sends it.
public struct PulledPage: Sendable, Equatable {
    /// The answer's body.
    public let json: [UInt8]
    /// Records on the page.
    public let count: Int
    public let cursor: String
    public let hasMore: Bool

    public init(json: [UInt8], count: Int, cursor: String, hasMore: Bool) {
        self.json = json
        self.count = count
        self.cursor = cursor
        self.hasMore = hasMore
    }

    /// The page's records, read back from `json` in either form (tests and tools).
    public func changes() throws -> [RecordView] {
        guard let page = PullPage(json: try JSONParser.parse(json)) else { throw UnexpectedAnswer("not a pull page") }
        return page.changes
    }
}

/// Writes a page from the rows as PostgreSQL gave them: each value goes from libpq's bytes
/// into the JSON without a Swift value between (a pull moves many records), and record
/// data is copied as stored, not parsed.
struct PulledPageWriter {
    private var out: [UInt8] = []
    private(set) var count = 0
    let form: PullForm
    /// The compact form's devices.
    private var devices = DeviceTable()

    /// The columns a record takes from `first` on: collection, record_id, version, deleted,
    /// data, updated_at, updated_by, write_clock as stored, the newer of its other clocks
    /// (`greatest` in byte order, which is their order), visibility, public_id, can_fork,
    /// published_at, forked_from.
    static let columns: [PGType] = [
        .text, .text, .int8, .bool, .jsonb, .timestamptz, .uuid, .text, .text, .text, .text, .bool, .timestamptz, .text,
    ]
    /// The write clock's text, expanded from its stored form for each record.
    private var writeClock: [UInt8] = []

    init(form: PullForm, expectedBytes: Int) {
        self.form = form
        out.reserveCapacity(expectedBytes)
        out.append(contentsOf: #"{"changes":["#.utf8)
    }

    /// Checks once per page that the statement still gives the columns in the order and
    /// types this writer reads.
    static func check(_ row: PGRows.Row, from first: Int) throws {
        for (offset, type) in columns.enumerated() where row.type(at: first + offset) != type {
            throw UnexpectedAnswer("pull column \(first + offset) is of type \(row.type(at: first + offset)), not \(type)")
        }
    }

    /// Appends the record in `row`'s columns from `first` on, in `RecordView`'s wire shape
    /// in the writer's form (`PullForm`). Publication shows only while readers can see it.
    /// Text goes from its bytes; numbers, flags and times are read as PQBridge reads them.
    mutating func append(_ row: PGRows.Row, from first: Int) throws {
        if count > 0 { out.append(UInt8(ascii: ",")) }
        out.append(UInt8(ascii: "{"))
        count += 1
        let full = form == .full
        let deleted = try row.decode(Bool.self, at: first + 3)
        let visibility = try row.decode(String?.self, at: first + 9).flatMap(RecordState.PublicVisibility.init(rawValue:)) ?? .private
        let shown = visibility != .private
        key(Self.collection); text(row, first)
        key(Self.id); text(row, first + 1)
        key(Self.version); out.append(contentsOf: String(try row.decode(Int64.self, at: first + 2)).utf8)
        if full || deleted { key(Self.deleted); out.append(contentsOf: deleted ? Self.true : Self.false) }
        if full || !deleted {
            key(Self.data)
            row.withBytes(at: first + 4) { bytes in
                // jsonb's binary form: a version byte, then the text.
                if let bytes, !deleted, bytes.count > 1 { out.append(contentsOf: bytes[1...]) } else { out.append(contentsOf: Self.null) }
            }
        }
        if full {
            if let updatedAt = try row.decode(PGTimestamp?.self, at: first + 5) { key(Self.updatedAt); time(updatedAt) }
            if let updatedBy = try? row.decode(String?.self, at: first + 6) {
                key(Self.updatedBy)
                JSONWriter.writeString(updatedBy, into: &out)
            }
        }
        try hlc(row, first + 7)
        if full || shown {
            key(Self.visibility); JSONWriter.writeString(visibility.rawValue, into: &out)
            key(Self.publicID); if shown { text(row, first + 10) } else { out.append(contentsOf: Self.null) }
            key(Self.canFork); out.append(contentsOf: try shown && row.decode(Bool?.self, at: first + 11) == true ? Self.true : Self.false)
            key(Self.publishedAt)
            if shown, let publishedAt = try row.decode(PGTimestamp?.self, at: first + 12) { time(publishedAt) } else { out.append(contentsOf: Self.null) }
        }
        if full || !row.isNull(at: first + 13) { key(Self.forkedFrom); text(row, first + 13) }
        out.append(UInt8(ascii: "}"))
    }

    consuming func finish(cursor: String, hasMore: Bool) -> PulledPage {
        out.append(UInt8(ascii: "]"))
        if form == .compact {
            out.append(contentsOf: #","devices":["#.utf8)
            for (index, device) in devices.order.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                device.withUnsafeBytes { JSONWriter.writeString(utf8: $0, into: &out) }
            }
            out.append(UInt8(ascii: "]"))
        }
        out.append(contentsOf: #","cursor":"#.utf8)
        JSONWriter.writeString(cursor, into: &out)
        out.append(contentsOf: #","has_more":"#.utf8)
        out.append(contentsOf: hasMore ? Self.true : Self.false)
        out.append(UInt8(ascii: "}"))
        return PulledPage(json: out, count: count, cursor: cursor, hasMore: hasMore)
    }

    private mutating func key(_ name: [UInt8]) { out.append(contentsOf: name) }

    private mutating func text(_ row: PGRows.Row, _ column: Int) {
        row.withBytes(at: column) { bytes in
            if let bytes { JSONWriter.writeString(utf8: bytes, into: &out) } else { out.append(contentsOf: Self.null) }
        }
    }

    /// Times are formatted here: `to_char` cost PostgreSQL more than the rest of a page's
    /// columns together.
    private mutating func time(_ time: PGTimestamp) {
        out.append(UInt8(ascii: "\""))
        RFC3339.write(unixMicroseconds: time.microseconds + PGTimestamp.unixOffset, into: &out)
        out.append(UInt8(ascii: "\""))
    }

    /// The record shows the clock of its newest stamp, the write clock (`column`, in its
    /// stored form) or the newer of the others (`column + 1`); a stamp is `<hlc> <op id>`.
    /// The full form writes `null` for a record without one, the compact form nothing.
    private mutating func hlc(_ row: PGRows.Row, _ column: Int) throws {
        writeClock.removeAll(keepingCapacity: true)
        try row.withBytes(at: column) { stored in
            if let stored, !StoredStamp.expand(stored, into: &writeClock) {
                throw UnexpectedAnswer("a record's write clock is stored in no form a stamp takes")
            }
        }
        try row.withBytes(at: column + 1) { other in
            try writeClock.withUnsafeBytes { written in
                let newest = other.map { written.isEmpty || $0.lexicographicallyPrecedes(written) == false ? $0 : written } ?? written
                guard let space = newest.lastIndex(of: UInt8(ascii: " ")) else {
                    if form == .full { out.append(contentsOf: Self.hlc); out.append(contentsOf: Self.null) }
                    return
                }
                out.append(contentsOf: Self.hlc)
                let clock = UnsafeRawBufferPointer(rebasing: newest[..<space])
                guard form == .compact else { return JSONWriter.writeString(utf8: clock, into: &out) }
                guard clock.count > HLC.nodeOffset else { throw UnexpectedAnswer("a record's clock is too short to name a device") }
                out.append(UInt8(ascii: "\""))
                out.append(contentsOf: clock[..<HLC.nodeOffset])
                out.append(contentsOf: String(devices.index(UnsafeRawBufferPointer(rebasing: clock[HLC.nodeOffset...]))).utf8)
                out.append(UInt8(ascii: "\""))
            }
        }
    }

    private typealias Key = RecordView.CodingKeys
    private static func name(_ key: Key, first: Bool = false) -> [UInt8] {
        Array(((first ? "" : ",") + "\"\(key.rawValue)\":").utf8)
    }
    private static let collection = name(.collection, first: true), id = name(.id), version = name(.version)
    private static let deleted = name(.deleted), data = name(.data), updatedAt = name(.updatedAt), updatedBy = name(.updatedBy)
    private static let hlc = name(.hlc), visibility = name(.visibility), publicID = name(.publicID), canFork = name(.canFork)
    private static let publishedAt = name(.publishedAt), forkedFrom = name(.forkedFrom)
    private static let null = Array("null".utf8), `true` = Array("true".utf8), `false` = Array("false".utf8)
}

/// A compact page's devices, in the order the page first names them.
private struct DeviceTable {
    private(set) var order: [[UInt8]] = []
    private var indices: [[UInt8]: Int] = [:]
    /// The last one named: a page's records mostly come from few devices, often in runs.
    private var last: (name: [UInt8], index: Int)?

    /// The index of `node`, added when new.
    mutating func index(_ node: UnsafeRawBufferPointer) -> Int {
        if let last, last.name.elementsEqual(node) { return last.index }
        let name = Array(node)
        let index: Int
        if let known = indices[name] {
            index = known
        } else {
            index = order.count
            order.append(name)
            indices[name] = index
        }
        last = (name, index)
        return index
    }
}
