internal import CLibPQ
import Foundation

/// A result in binary format, read by column position into typed values.
///
///     for row in rows {
///         let (id, name, revoked) = try row.decode((UUID, String, Date?).self)
///     }
public struct PGRows: Sendable, RandomAccessCollection {
    @usableFromInline let result: Result

    public var columns: [String] { result.columns }
    public var affectedRows: Int { result.affectedRows }
    public var startIndex: Int { 0 }
    public var endIndex: Int { result.rowCount }
    public subscript(index: Int) -> Row { Row(result: result, index: index) }

    /// Takes ownership of `result` (binary format): its values are read where libpq keeps
    /// them, not copied, and it is freed with the last row that refers to it.
    init(_ result: OpaquePointer) {
        self.result = Result(result)
    }

    /// libpq's result, read-only once made (so any thread may read it).
    @usableFromInline
    final class Result: @unchecked Sendable {
        private let handle: OpaquePointer
        @usableFromInline let columns: [String]
        @usableFromInline let types: [PGType]
        @usableFromInline let rowCount: Int
        let affectedRows: Int

        init(_ handle: OpaquePointer) {
            self.handle = handle
            let columnCount = Int(PQnfields(handle))
            columns = (0..<columnCount).map { String(cString: PQfname(handle, Int32($0))) }
            types = (0..<columnCount).map { PGType(oid: PQftype(handle, Int32($0))) }
            rowCount = Int(PQntuples(handle))
            affectedRows = Int(String(cString: PQcmdTuples(handle))) ?? 0
        }

        deinit { PQclear(handle) }

        /// The bytes of one value; nil for NULL.
        @usableFromInline
        func value(row: Int, column: Int) -> UnsafeRawBufferPointer? {
            if PQgetisnull(handle, Int32(row), Int32(column)) == 1 { return nil }
            return UnsafeRawBufferPointer(
                start: PQgetvalue(handle, Int32(row), Int32(column)), count: Int(PQgetlength(handle, Int32(row), Int32(column))))
        }

        @usableFromInline
        func error(column: Int, _ swiftType: Any.Type, _ detail: String) -> PGError {
            let name = column < columns.count ? columns[column] : "\(column) of \(columns.count)"
            return PGError(code: .decoding, message: "column \(name) read as \(swiftType): \(detail)")
        }
    }

    public struct Row: Sendable {
        @usableFromInline let result: Result
        @usableFromInline let index: Int

        @usableFromInline
        init(result: Result, index: Int) {
            self.result = result
            self.index = index
        }

        public var columnCount: Int { result.columns.count }

        public func isNull(at column: Int) -> Bool { result.value(row: index, column: column) == nil }

        /// The value of one column. NULL reads as nil where `Value` is an `Optional`, and
        /// fails otherwise.
        @inlinable
        public func decode<Value: PGDecodable>(_: Value.Type = Value.self, at column: Int) throws(PGError) -> Value {
            guard column < result.columns.count else { throw result.error(column: column, Value.self, "no such column") }
            guard let bytes = result.value(row: index, column: column) else {
                guard let none = Value.pgNull else { throw result.error(column: column, Value.self, "NULL") }
                return none
            }
            do {
                return try Value(pgBytes: bytes, type: result.types[column])
            } catch {
                throw result.error(column: column, Value.self, error.message)
            }
        }

        /// The first columns, in order, as the tuple's types.
        @inlinable
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
