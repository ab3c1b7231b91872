import Foundation

/// A PostgreSQL type, by its oid (pg_type.oid; fixed for the built-in types).
public struct PGType: Sendable, Hashable, CustomStringConvertible {
    public let oid: UInt32
    public init(oid: UInt32) { self.oid = oid }

    public static let bool = PGType(oid: 16)
    public static let bytea = PGType(oid: 17)
    public static let name = PGType(oid: 19)
    public static let int8 = PGType(oid: 20)
    public static let int2 = PGType(oid: 21)
    public static let int4 = PGType(oid: 23)
    public static let text = PGType(oid: 25)
    public static let json = PGType(oid: 114)
    public static let float8 = PGType(oid: 701)
    public static let bpchar = PGType(oid: 1042)
    public static let varchar = PGType(oid: 1043)
    public static let timestamp = PGType(oid: 1114)
    public static let timestamptz = PGType(oid: 1184)
    public static let uuid = PGType(oid: 2950)
    public static let jsonb = PGType(oid: 3802)
    public static let boolArray = PGType(oid: 1000)
    public static let int4Array = PGType(oid: 1007)
    public static let textArray = PGType(oid: 1009)
    public static let int8Array = PGType(oid: 1016)
    public static let float8Array = PGType(oid: 1022)
    public static let timestamptzArray = PGType(oid: 1185)
    public static let uuidArray = PGType(oid: 2951)
    public static let jsonbArray = PGType(oid: 3807)

    public var description: String { "oid \(oid)" }
}

/// A Swift value sent as a parameter, in binary format.
public protocol PGEncodable: Sendable {
    static var pgType: PGType { get }
    func encode(into buffer: inout PGBuffer)
    /// Whether the value is SQL NULL: only an `Optional` that is nil. (A requirement, not
    /// a dynamic cast to `Optional`: a profile of the worker found such casts, one per
    /// array element, at 9% of its CPU.)
    var isPGNull: Bool { get }
}

extension PGEncodable {
    public var isPGNull: Bool { false }
}

/// A Swift value read from a result column in binary format.
public protocol PGDecodable: Sendable {
    /// `bytes` is the column's value (never NULL here); `type` is the column's type.
    init(pgBytes bytes: UnsafeRawBufferPointer, type: PGType) throws(PGError)
    /// What SQL NULL reads as: nil, an error, for every type but `Optional`.
    static var pgNull: Self? { get }
}

extension PGDecodable {
    public static var pgNull: Self? { nil }
}

/// What an array parameter holds, with the array's own type.
public protocol PGArrayElement: PGEncodable {
    static var pgArrayType: PGType { get }
}

public typealias PGCodable = PGEncodable & PGDecodable

extension PGError {
    static func decoding(_ swiftType: Any.Type, _ type: PGType, _ detail: String = "") -> PGError {
        PGError(code: .decoding, message: "cannot read \(type) as \(swiftType)\(detail.isEmpty ? "" : ": " + detail)")
    }
}

extension UnsafeRawBufferPointer {
    /// The big-endian integer at `offset`.
    @inline(__always)
    func bigEndian<Integer: FixedWidthInteger>(_: Integer.Type, at offset: Int = 0) -> Integer {
        var value: Integer = 0
        withUnsafeMutableBytes(of: &value) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: self[offset..<offset + MemoryLayout<Integer>.size])) }
        return Integer(bigEndian: value)
    }
}

// MARK: - Integers, Bool, Double

extension Int64: PGCodable, PGArrayElement {
    public static var pgType: PGType { .int8 }
    public static var pgArrayType: PGType { .int8Array }
    public func encode(into buffer: inout PGBuffer) { buffer.write(self) }
    public init(pgBytes bytes: UnsafeRawBufferPointer, type: PGType) throws(PGError) {
        switch (type, bytes.count) {
        case (.int8, 8): self = bytes.bigEndian(Int64.self)
        case (.int4, 4): self = Int64(bytes.bigEndian(Int32.self))
        case (.int2, 2): self = Int64(bytes.bigEndian(Int16.self))
        default: throw .decoding(Int64.self, type)
        }
    }
}

extension Int: PGCodable, PGArrayElement {
    public static var pgType: PGType { .int8 }
    public static var pgArrayType: PGType { .int8Array }
    public func encode(into buffer: inout PGBuffer) { buffer.write(Int64(self)) }
    public init(pgBytes bytes: UnsafeRawBufferPointer, type: PGType) throws(PGError) {
        self = Int(try Int64(pgBytes: bytes, type: type))
    }
}

extension Int32: PGCodable, PGArrayElement {
    public static var pgType: PGType { .int4 }
    public static var pgArrayType: PGType { .int4Array }
    public func encode(into buffer: inout PGBuffer) { buffer.write(self) }
    public init(pgBytes bytes: UnsafeRawBufferPointer, type: PGType) throws(PGError) {
        switch (type, bytes.count) {
        case (.int4, 4): self = bytes.bigEndian(Int32.self)
        case (.int2, 2): self = Int32(bytes.bigEndian(Int16.self))
        default: throw .decoding(Int32.self, type)
        }
    }
}

extension Bool: PGCodable, PGArrayElement {
    public static var pgType: PGType { .bool }
    public static var pgArrayType: PGType { .boolArray }
    public func encode(into buffer: inout PGBuffer) { buffer.write(UInt8(self ? 1 : 0)) }
    public init(pgBytes bytes: UnsafeRawBufferPointer, type: PGType) throws(PGError) {
        guard type == .bool, bytes.count == 1 else { throw .decoding(Bool.self, type) }
        self = bytes[0] != 0
    }
}

extension Double: PGCodable, PGArrayElement {
    public static var pgType: PGType { .float8 }
    public static var pgArrayType: PGType { .float8Array }
    public func encode(into buffer: inout PGBuffer) { buffer.write(bitPattern) }
    public init(pgBytes bytes: UnsafeRawBufferPointer, type: PGType) throws(PGError) {
        guard type == .float8, bytes.count == 8 else { throw .decoding(Double.self, type) }
        self = Double(bitPattern: bytes.bigEndian(UInt64.self))
    }
}

// MARK: - Text, JSON, bytes

extension String: PGCodable, PGArrayElement {
    public static var pgType: PGType { .text }
    public static var pgArrayType: PGType { .textArray }
    public func encode(into buffer: inout PGBuffer) { buffer.write(text: self) }
    /// Text of any text type, and a uuid in its canonical lower-case form.
    public init(pgBytes bytes: UnsafeRawBufferPointer, type: PGType) throws(PGError) {
        switch type {
        case .text, .varchar, .name, .bpchar, .json:
            self = String(decoding: bytes, as: UTF8.self)
        case .jsonb:
            guard bytes.first == 1 else { throw .decoding(String.self, type, "jsonb version") }
            self = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[1...]), as: UTF8.self)
        case .uuid:
            guard bytes.count == 16 else { throw .decoding(String.self, type) }
            self = Self.lowercaseUUID(bytes)
        default:
            throw .decoding(String.self, type)
        }
    }
}

extension String {
    /// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` from 16 bytes (Foundation's `uuidString` goes
    /// through `snprintf`, which a perf profile of the pull found among its top costs).
    static func lowercaseUUID(_ bytes: UnsafeRawBufferPointer) -> String {
        String(unsafeUninitializedCapacity: 36) { out in
            let hex: StaticString = "0123456789abcdef"
            var index = 0
            for (offset, byte) in bytes.enumerated() {
                if offset == 4 || offset == 6 || offset == 8 || offset == 10 {
                    out[index] = UInt8(ascii: "-")
                    index += 1
                }
                out[index] = hex.utf8Start[Int(byte >> 4)]
                out[index + 1] = hex.utf8Start[Int(byte & 0x0f)]
                index += 2
            }
            return index
        }
    }
}

/// JSON text sent and read as `jsonb`: the text goes in and comes out as PostgreSQL keeps
/// it, never parsed here.
public struct PGJSON: PGCodable, PGArrayElement, Hashable {
    public var text: String
    public init(_ text: String) { self.text = text }

    public static var pgType: PGType { .jsonb }
    public static var pgArrayType: PGType { .jsonbArray }
    public func encode(into buffer: inout PGBuffer) {
        buffer.write(UInt8(1))
        buffer.write(text: text)
    }
    public init(pgBytes bytes: UnsafeRawBufferPointer, type: PGType) throws(PGError) {
        text = try String(pgBytes: bytes, type: type == .json || type == .jsonb ? type : PGType(oid: 0))
    }
}

extension Data: PGCodable {
    public static var pgType: PGType { .bytea }
    public func encode(into buffer: inout PGBuffer) { buffer.write(contentsOf: self) }
    public init(pgBytes bytes: UnsafeRawBufferPointer, type: PGType) throws(PGError) {
        guard type == .bytea else { throw .decoding(Data.self, type) }
        self = Data(bytes)
    }
}

// MARK: - UUID, timestamps

extension UUID: PGCodable, PGArrayElement {
    public static var pgType: PGType { .uuid }
    public static var pgArrayType: PGType { .uuidArray }
    public func encode(into buffer: inout PGBuffer) {
        withUnsafeBytes(of: uuid) { buffer.write(contentsOf: $0) }
    }
    public init(pgBytes bytes: UnsafeRawBufferPointer, type: PGType) throws(PGError) {
        guard type == .uuid, bytes.count == 16 else { throw .decoding(UUID.self, type) }
        var value: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &value) { $0.copyMemory(from: bytes) }
        self = UUID(uuid: value)
    }
}

/// A point in time as PostgreSQL keeps it: microseconds since 2000-01-01 00:00:00 UTC
/// (`Int64.max` and `Int64.min` are `infinity` and `-infinity`). Exact across the whole
/// range, which a `Date` (a `Double` of seconds) is not.
public struct PGTimestamp: PGCodable, PGArrayElement, Hashable, Comparable {
    public var microseconds: Int64
    public init(microsecondsSince2000 microseconds: Int64) { self.microseconds = microseconds }

    static let epochOffset: Int64 = 946_684_800  // 2000-01-01 in Unix seconds
    /// What to add to `microseconds` for microseconds since 1970.
    public static let unixOffset: Int64 = epochOffset * 1_000_000

    public init(_ date: Date) {
        microseconds = Int64(((date.timeIntervalSince1970 - Double(Self.epochOffset)) * 1_000_000).rounded())
    }

    public var date: Date {
        Date(timeIntervalSince1970: Double(microseconds) / 1_000_000 + Double(Self.epochOffset))
    }

    public static func < (a: PGTimestamp, b: PGTimestamp) -> Bool { a.microseconds < b.microseconds }

    public static var pgType: PGType { .timestamptz }
    public static var pgArrayType: PGType { .timestamptzArray }
    public func encode(into buffer: inout PGBuffer) { buffer.write(microseconds) }
    public init(pgBytes bytes: UnsafeRawBufferPointer, type: PGType) throws(PGError) {
        guard type == .timestamptz || type == .timestamp, bytes.count == 8 else { throw .decoding(PGTimestamp.self, type) }
        microseconds = bytes.bigEndian(Int64.self)
    }
}

extension Date: PGCodable, PGArrayElement {
    public static var pgType: PGType { .timestamptz }
    public static var pgArrayType: PGType { .timestamptzArray }
    public func encode(into buffer: inout PGBuffer) { PGTimestamp(self).encode(into: &buffer) }
    public init(pgBytes bytes: UnsafeRawBufferPointer, type: PGType) throws(PGError) {
        self = try PGTimestamp(pgBytes: bytes, type: type).date
    }
}

// MARK: - Arrays (one dimension)

/// An `Optional` is sent as NULL when it is nil.
extension Optional: PGEncodable where Wrapped: PGEncodable {
    public static var pgType: PGType { Wrapped.pgType }
    public func encode(into buffer: inout PGBuffer) { self?.encode(into: &buffer) }
    public var isPGNull: Bool { self == nil }
}

extension Optional: PGArrayElement where Wrapped: PGArrayElement {
    public static var pgArrayType: PGType { Wrapped.pgArrayType }
}

extension Array: PGEncodable where Element: PGArrayElement {
    public static var pgType: PGType { Element.pgArrayType }

    /// Header (dimensions, whether any element is NULL, the element type, then length and
    /// lower bound 1), then each element as its length and bytes (-1: NULL).
    public func encode(into buffer: inout PGBuffer) {
        let nulls = contains { $0.isPGNull }
        buffer.write(Int32(isEmpty ? 0 : 1))
        buffer.write(Int32(nulls ? 1 : 0))
        buffer.write(Int32(bitPattern: Element.pgType.oid))
        if isEmpty { return }
        buffer.write(Int32(count))
        buffer.write(Int32(1))
        for element in self {
            if element.isPGNull {
                buffer.write(Int32(-1))
                continue
            }
            let lengthAt = buffer.bytes.count
            buffer.write(Int32(0))
            element.encode(into: &buffer)
            let length = Int32(buffer.bytes.count - lengthAt - 4)
            Swift.withUnsafeBytes(of: length.bigEndian) { buffer.bytes.replaceSubrange(lengthAt..<lengthAt + 4, with: $0) }
        }
    }
}

extension Array: PGDecodable where Element: PGDecodable {
    /// A one-dimensional array (or an empty one). NULL elements fail unless `Element` is
    /// an `Optional`.
    public init(pgBytes bytes: UnsafeRawBufferPointer, type: PGType) throws(PGError) {
        guard bytes.count >= 12 else { throw .decoding([Element].self, type) }
        let dimensions = bytes.bigEndian(Int32.self)
        let elementType = PGType(oid: bytes.bigEndian(UInt32.self, at: 8))
        if dimensions == 0 { self = []; return }
        guard dimensions == 1, bytes.count >= 20 else { throw .decoding([Element].self, type, "\(dimensions) dimensions") }
        let count = Int(bytes.bigEndian(Int32.self, at: 12))
        var elements: [Element] = []
        elements.reserveCapacity(count)
        var offset = 20
        for _ in 0..<count {
            guard offset + 4 <= bytes.count else { throw .decoding([Element].self, type, "truncated") }
            let length = Int(bytes.bigEndian(Int32.self, at: offset))
            offset += 4
            if length < 0 {
                guard let none = Element.pgNull else { throw .decoding([Element].self, type, "NULL element") }
                elements.append(none)
                continue
            }
            guard offset + length <= bytes.count else { throw .decoding([Element].self, type, "truncated") }
            elements.append(try Element(pgBytes: UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + length]), type: elementType))
            offset += length
        }
        self = elements
    }
}

extension Optional: PGDecodable where Wrapped: PGDecodable {
    public static var pgNull: Wrapped?? { .some(nil) }

    public init(pgBytes bytes: UnsafeRawBufferPointer, type: PGType) throws(PGError) {
        self = .some(try Wrapped(pgBytes: bytes, type: type))
    }
}
