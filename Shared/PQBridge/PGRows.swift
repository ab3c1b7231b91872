internal import CLibPQ
import Foundation

/// A result copied out of libpq in binary format: every value's bytes in one buffer, read
/// by column position into typed values.
///
///     for row in rows {
///         let (id, name, revoked) = try row.decode((UUID, String, Date?).self)
///     }
public struct PGRows: Sendable, RandomAccessCollection {
    public let columns: [String]
    let types: [PGType]
    let bytes: [UInt8]
    /// Per cell, row by row: where its bytes start in `bytes`, and their length (-1: NULL).
    let offsets: [Int]
    let lengths: [Int32]
    public let affectedRows: Int

    public var startIndex: Int { 0 }
    public var endIndex: Int { columns.isEmpty ? 0 : lengths.count / columns.count }
    public subscript(index: Int) -> Row { Row(rows: self, index: index) }

    /// Copies `result` (binary format) out of libpq.
    init(_ result: OpaquePointer) {
        let columnCount = Int(PQnfields(result))
        let rowCount = Int(PQntuples(result))
        columns = (0..<columnCount).map { String(cString: PQfname(result, Int32($0))) }
        types = (0..<columnCount).map { PGType(oid: PQftype(result, Int32($0))) }
        var bytes: [UInt8] = []
        var offsets: [Int] = []
        var lengths: [Int32] = []
        offsets.reserveCapacity(rowCount * columnCount)
        lengths.reserveCapacity(rowCount * columnCount)
        for row in 0..<Int32(rowCount) {
            for column in 0..<Int32(columnCount) {
                offsets.append(bytes.count)
                if PQgetisnull(result, row, column) == 1 {
                    lengths.append(-1)
                    continue
                }
                let length = PQgetlength(result, row, column)
                lengths.append(length)
                if length > 0, let value = PQgetvalue(result, row, column) {
                    value.withMemoryRebound(to: UInt8.self, capacity: Int(length)) {
                        bytes.append(contentsOf: UnsafeBufferPointer(start: $0, count: Int(length)))
                    }
                }
            }
        }
        self.bytes = bytes
        self.offsets = offsets
        self.lengths = lengths
        affectedRows = Int(String(cString: PQcmdTuples(result))) ?? 0
    }

    public struct Row: Sendable {
        let rows: PGRows
        let index: Int

        public var columnCount: Int { rows.columns.count }

        public func isNull(at column: Int) -> Bool {
            rows.lengths[index * rows.columns.count + column] < 0
        }

        /// The value of one column. NULL reads as nil where `Value` is an `Optional`, and
        /// fails otherwise.
        public func decode<Value: PGDecodable>(_: Value.Type = Value.self, at column: Int) throws(PGError) -> Value {
            guard column < rows.columns.count else {
                throw PGError(code: .decoding, message: "column \(column) of \(rows.columns.count) read as \(Value.self)")
            }
            let cell = index * rows.columns.count + column
            let length = Int(rows.lengths[cell])
            if length < 0 {
                guard let none = (Value.self as? any PGNullable.Type)?.pgNull as? Value else {
                    throw PGError(code: .decoding, message: "column \(rows.columns[column]) is NULL, read as \(Value.self)")
                }
                return none
            }
            let start = rows.offsets[cell]
            let type = rows.types[column]
            let decoded = rows.bytes.withUnsafeBytes { all -> Result<Value, PGError> in
                do throws(PGError) {
                    return .success(try Value(pgBytes: UnsafeRawBufferPointer(rebasing: all[start..<start + length]), type: type))
                } catch {
                    return .failure(error)
                }
            }
            switch decoded {
            case .success(let value): return value
            case .failure(let error):
                throw PGError(code: .decoding, message: "column \(rows.columns[column]): \(error.message)")
            }
        }

        /// The first columns, in order, as the tuple's types.
        public func decode<each Value: PGDecodable>(_: (repeat each Value).Type) throws -> (repeat each Value) {
            var column = 0
            func next<One: PGDecodable>(_: One.Type) throws -> One {
                defer { column += 1 }
                return try decode(One.self, at: column)
            }
            return (repeat try next((each Value).self))
        }

        /// The columns, in order, as the stored properties of a `Decodable` struct, in the
        /// order they are declared (which is the order its synthesized `init(from:)`
        /// reads them). Each property's type must be `PGDecodable`.
        public func decode<Record: Decodable>(as _: Record.Type) throws -> Record {
            try Record(from: PositionalDecoder(row: self))
        }
    }
}

/// Reads a row's columns one after the other, whatever the keys are called.
private final class PositionalDecoder: Decoder {
    let row: PGRows.Row
    var column = 0
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(row: PGRows.Row) { self.row = row }

    func container<Key: CodingKey>(keyedBy _: Key.Type) throws -> KeyedDecodingContainer<Key> {
        KeyedDecodingContainer(Container<Key>(decoder: self))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        throw PGError(code: .decoding, message: "a row decodes into a struct's properties, not an array")
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        throw PGError(code: .decoding, message: "a row decodes into a struct's properties, not a single value")
    }

    func next<Value>(_ type: Value.Type) throws -> Value {
        guard let decodable = type as? any PGDecodable.Type else {
            throw PGError(code: .decoding, message: "\(type) is not PGDecodable")
        }
        defer { column += 1 }
        return try open(decodable) as! Value
    }

    private func open<Value: PGDecodable>(_ type: Value.Type) throws -> any PGDecodable {
        try row.decode(Value.self, at: column)
    }

    struct Container<Key: CodingKey>: KeyedDecodingContainerProtocol {
        let decoder: PositionalDecoder
        var codingPath: [any CodingKey] { [] }
        var allKeys: [Key] { [] }
        func contains(_ key: Key) -> Bool { decoder.column < decoder.row.columnCount }
        func decodeNil(forKey key: Key) throws -> Bool {
            guard decoder.row.isNull(at: decoder.column) else { return false }
            decoder.column += 1
            return true
        }
        func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try decoder.next(type) }
        func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
            try decodeNil(forKey: key) ? nil : decoder.next(type)
        }
        func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try decoder.next(type) }
        func decode(_ type: String.Type, forKey key: Key) throws -> String { try decoder.next(type) }
        func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try decoder.next(type) }
        func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try decoder.next(type) }
        func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try decoder.next(type) }
        func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try decoder.next(type) }
        func decode(_ type: Float.Type, forKey key: Key) throws -> Float { Float(try decoder.next(Double.self)) }
        func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try narrow(key) }
        func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try narrow(key) }
        func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try narrow(key) }
        func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try narrow(key) }
        func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try narrow(key) }
        func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try narrow(key) }
        func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try narrow(key) }
        func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
            throw PGError(code: .decoding, message: "nested values are not read from a row")
        }
        func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
            throw PGError(code: .decoding, message: "nested values are not read from a row")
        }
        func superDecoder() throws -> any Decoder { decoder }
        func superDecoder(forKey key: Key) throws -> any Decoder { decoder }

        private func narrow<Integer: FixedWidthInteger>(_ key: Key) throws -> Integer {
            let wide = try decoder.next(Int64.self)
            guard let value = Integer(exactly: wide) else {
                throw PGError(code: .decoding, message: "\(wide) does not fit \(Integer.self) (\(key.stringValue))")
            }
            return value
        }
    }
}
