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

        /// The type PostgreSQL gave a column.
        public func type(at column: Int) -> PGType { result.types[column] }

        /// A column's value as libpq holds it (binary format), nil for NULL: for a writer
        /// that copies values out without making Swift values of them.
        public func withBytes<T>(at column: Int, _ body: (UnsafeRawBufferPointer?) throws -> T) rethrows -> T {
            try withExtendedLifetime(result) { try body(result.value(row: index, column: column)) }
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

        /// A `Decodable` struct, each stored property read from the column its coding key
        /// names: the key itself (`content_type`, or a `CodingKeys` raw value) or the key in
        /// snake case (`deviceID` reads `device_id`). Each property's type must be
        /// `PGDecodable`; an optional property whose column the result lacks reads as nil.
        public func decode<Record: Decodable>(as _: Record.Type) throws -> Record {
            try Record(from: ColumnDecoder(row: self))
        }

        /// The position of the (first) column named `name`, if the result has one.
        func column(named name: String) -> Int? { result.columns.firstIndex(of: name) }
    }
}

/// Reads a row's columns by the names of the keys asked for.
private final class ColumnDecoder: Decoder {
    let row: PGRows.Row
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

    /// The column a key names: the key as written, else in snake case.
    func column(for key: some CodingKey) -> Int? {
        row.column(named: key.stringValue) ?? row.column(named: Self.snakeCase(key.stringValue))
    }

    func value<Value>(_ type: Value.Type, for key: some CodingKey) throws -> Value {
        guard let decodable = type as? any PGDecodable.Type else {
            throw PGError(code: .decoding, message: "\(type) is not PGDecodable")
        }
        guard let column = column(for: key) else {
            throw PGError(code: .decoding, message: "no column \(key.stringValue) in (\(row.result.columns.joined(separator: ", ")))")
        }
        return try open(decodable, at: column) as! Value
    }

    private func open<Value: PGDecodable>(_ type: Value.Type, at column: Int) throws -> any PGDecodable {
        try row.decode(Value.self, at: column)
    }

    /// `deviceID` → `device_id`, `refCount` → `ref_count`.
    static func snakeCase(_ name: String) -> String {
        var snake = ""
        var previous: Character?
        for character in name {
            if character.isUppercase, let previous, previous.isLowercase || previous.isNumber { snake.append("_") }
            snake.append(contentsOf: character.lowercased())
            previous = character
        }
        return snake
    }

    struct Container<Key: CodingKey>: KeyedDecodingContainerProtocol {
        let decoder: ColumnDecoder
        var codingPath: [any CodingKey] { [] }
        var allKeys: [Key] { [] }
        func contains(_ key: Key) -> Bool { decoder.column(for: key) != nil }
        func decodeNil(forKey key: Key) throws -> Bool {
            guard let column = decoder.column(for: key) else { return true }
            return decoder.row.isNull(at: column)
        }
        func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try decoder.value(type, for: key) }
        func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
            try decodeNil(forKey: key) ? nil : decoder.value(type, for: key)
        }
        func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try decoder.value(type, for: key) }
        func decode(_ type: String.Type, forKey key: Key) throws -> String { try decoder.value(type, for: key) }
        func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try decoder.value(type, for: key) }
        func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try decoder.value(type, for: key) }
        func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try decoder.value(type, for: key) }
        func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try decoder.value(type, for: key) }
        func decode(_ type: Float.Type, forKey key: Key) throws -> Float { Float(try decoder.value(Double.self, for: key)) }
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
            let wide = try decoder.value(Int64.self, for: key)
            guard let value = Integer(exactly: wide) else {
                throw PGError(code: .decoding, message: "\(wide) does not fit \(Integer.self) (\(key.stringValue))")
            }
            return value
        }
    }
}
