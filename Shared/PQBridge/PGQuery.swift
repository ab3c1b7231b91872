import Foundation

/// A statement with its parameters, written as one string: each interpolated value becomes
/// the next `$n` placeholder and is sent beside the text, typed and in PostgreSQL's binary
/// format. No value is ever spliced into the SQL.
///
///     let query: PGQuery = "SELECT name FROM devices WHERE device_id = \(id) AND user_id = \(user)"
///
/// SQL that the code itself composes (a column list, an optional clause) goes in with
/// `\(sql: fragment)`; it must never hold input.
public struct PGQuery: Sendable, ExpressibleByStringInterpolation {
    public private(set) var sql: String
    public private(set) var binds: PGBinds

    public init(stringLiteral value: String) {
        sql = value
        binds = PGBinds()
    }

    public init(stringInterpolation: StringInterpolation) {
        sql = stringInterpolation.sql
        binds = stringInterpolation.binds
    }

    /// A statement whose parameters were collected apart from its text, with `$n`
    /// placeholders already in `sql` (for statements built in a loop).
    public init(unsafeSQL sql: String, binds: PGBinds) {
        self.sql = sql
        self.binds = binds
    }

    /// `text` as a quoted SQL string literal.
    public static func literal(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: "''") + "'"
    }

    public struct StringInterpolation: StringInterpolationProtocol {
        var sql = ""
        var binds = PGBinds()

        public init(literalCapacity: Int, interpolationCount: Int) {
            sql.reserveCapacity(literalCapacity + 3 * interpolationCount)
        }

        public mutating func appendLiteral(_ literal: String) { sql += literal }

        /// A value, or NULL when it is nil. (One overload taking an `Optional`, so that the
        /// compiler does not warn about an optional in an interpolation.)
        public mutating func appendInterpolation<Value: PGEncodable>(_ value: Value?) {
            sql += binds.append(value)
        }

        /// An enum's value goes in as a parameter of its raw type, never as a literal.
        public mutating func appendInterpolation<Value: RawRepresentable & Sendable>(_ value: Value)
        where Value.RawValue: PGEncodable {
            sql += binds.append(value.rawValue)
        }

        /// Values one after another, separated by commas, each the next parameter followed by
        /// its cast: for a list declared as data, whose values' types vary.
        public mutating func appendInterpolation(list parameters: [PGParameter]) {
            for (index, parameter) in parameters.enumerated() {
                if index > 0 { sql += ", " }
                sql += binds.append(parameter.value) + parameter.cast
            }
        }

        /// SQL the code composes itself. Never input.
        public mutating func appendInterpolation(sql fragment: String) { sql += fragment }

        /// An enum's value as an SQL literal, for where the planner must see the constant
        /// (a partial index's predicate): written from the enum, never typed again in SQL.
        public mutating func appendInterpolation<Value: RawRepresentable>(literal value: Value) where Value.RawValue == String {
            sql += PGQuery.literal(value.rawValue)
        }
    }
}

/// A parameter whose Swift type is known only at run time, with the cast its placeholder
/// takes in SQL (`::uuid[]`, or none).
public struct PGParameter: Sendable {
    public let value: any PGEncodable
    public let cast: String

    public init(_ value: some PGEncodable, cast: String = "") {
        self.value = value
        self.cast = cast
    }
}

/// The parameters of one statement: their types, and their values in binary format, all
/// in one buffer.
public struct PGBinds: Sendable {
    var types: [UInt32] = []
    /// Per parameter: where its bytes start in `bytes`, and their length (-1: NULL).
    var offsets: [Int] = []
    var lengths: [Int32] = []
    var bytes: [UInt8] = []
    /// Set when a text value holds NUL, which PostgreSQL text cannot store: the statement
    /// is refused before anything is sent.
    var invalidText = false

    public init() {}

    public var count: Int { types.count }

    /// Appends `value` and returns its placeholder, `$n`. An `Optional` that is nil is NULL.
    @discardableResult
    public mutating func append<Value: PGEncodable>(_ value: Value) -> String {
        types.append(Value.pgType.oid)
        offsets.append(bytes.count)
        if value.isPGNull {
            lengths.append(-1)
            return "$\(types.count)"
        }
        let start = bytes.count
        var buffer = PGBuffer()
        swap(&buffer.bytes, &bytes)  // no copy: the buffer appends to these bytes
        value.encode(into: &buffer)
        invalidText = invalidText || buffer.invalidText
        swap(&buffer.bytes, &bytes)
        lengths.append(Int32(bytes.count - start))
        return "$\(types.count)"
    }
}

/// Bytes being written in PostgreSQL's binary format (network byte order).
public struct PGBuffer: Sendable {
    public internal(set) var bytes: [UInt8]
    var invalidText = false

    init(bytes: [UInt8] = []) { self.bytes = bytes }

    public mutating func write<Integer: FixedWidthInteger>(_ value: Integer) {
        withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) }
    }

    /// UTF-8 text; NUL marks the whole statement invalid (PostgreSQL text cannot hold it).
    public mutating func write(text: String) {
        var text = text
        text.withUTF8 { utf8 in
            if utf8.contains(0) { invalidText = true }
            bytes.append(contentsOf: utf8)
        }
    }

    public mutating func write(contentsOf data: some Sequence<UInt8>) { bytes.append(contentsOf: data) }
}
