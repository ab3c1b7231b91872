import Foundation

/// A JSON value with a stable, compact encoding (sorted keys, no escaped slashes).
/// Records' `data` is a JSON object of these; numbers keep integers exact.
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public var objectValue: [String: JSONValue]? {
        if case .object(let object) = self { return object }
        return nil
    }

    public var arrayValue: [JSONValue]? {
        if case .array(let items) = self { return items }
        return nil
    }

    public var stringValue: String? {
        if case .string(let string) = self { return string }
        return nil
    }

    public var intValue: Int64? {
        switch self {
        case .int(let value): return value
        case .double(let value) where value.rounded() == value && abs(value) < 9.0e15: return Int64(value)
        default: return nil
        }
    }

    public var boolValue: Bool? {
        if case .bool(let value) = self { return value }
        return nil
    }

    public var isNull: Bool { self == .null }

    /// Whether a string or key anywhere inside holds U+0000, which PostgreSQL's `jsonb`
    /// and `text` cannot store: such a value is refused at the edge, never cut or altered.
    /// Where the first number that JSON cannot hold (NaN, an infinity) sits, as a path
    /// below `root` (`data.rating`, `data.scores[2]`); nil when every number is finite.
    public func nonFiniteNumberPath(_ root: String) -> String? {
        switch self {
        case .null, .bool, .int, .string: return nil
        case .double(let number): return number.isFinite ? nil : root
        case .array(let items):
            for (index, item) in items.enumerated() {
                if let path = item.nonFiniteNumberPath("\(root)[\(index)]") { return path }
            }
            return nil
        case .object(let fields):
            for key in fields.keys.sorted() {
                if let path = fields[key]?.nonFiniteNumberPath("\(root).\(key)") { return path }
            }
            return nil
        }
    }

    /// Whether objects and arrays nest more than `limit` levels here (an object or array is
    /// level 1; a scalar, 0). It looks no deeper than the limit.
    public func nests(deeperThan limit: Int) -> Bool {
        switch self {
        case .null, .bool, .int, .double, .string: return false
        case .array(let items): return limit <= 0 || items.contains { $0.nests(deeperThan: limit - 1) }
        case .object(let fields): return limit <= 0 || fields.values.contains { $0.nests(deeperThan: limit - 1) }
        }
    }

    public var containsNUL: Bool {
        switch self {
        case .null, .bool, .int, .double: return false
        case .string(let text): return text.utf8.contains(0)
        case .array(let items): return items.contains { $0.containsNUL }
        case .object(let fields): return fields.contains { $0.key.utf8.contains(0) || $0.value.containsNUL }
        }
    }
}

extension JSONValue: Codable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let bool = try? container.decode(Bool.self) {
            self = .bool(bool)
        } else if let int = try? container.decode(Int64.self) {
            self = .int(int)
        } else if let double = try? container.decode(Double.self) {
            self = .double(double)
        } else if let string = try? container.decode(String.self) {
            self = .string(string)
        } else if let array = try? container.decode([JSONValue].self) {
            self = .array(array)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .int(let value): try container.encode(value)
        case .double(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }
}

/// One place that turns values into the compact JSON the API and the database store.
public enum JSONCoding {
    public static func encoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(Timestamp.format(date))
        }
        return encoder
    }

    public static func decoder() -> JSONDecoder {
        JSONDecoder()
    }

    public static func encode<T: Encodable>(_ value: T) throws -> Data {
        try encoder().encode(value)
    }

    public static func encodeString<T: Encodable>(_ value: T) throws -> String {
        String(decoding: try encode(value), as: UTF8.self)
    }

    public static func decode<T: Decodable>(_ type: T.Type, from data: Data) throws -> T {
        try decoder().decode(type, from: data)
    }

    public static func decode<T: Decodable>(_ type: T.Type, from string: String) throws -> T {
        try decoder().decode(type, from: Data(string.utf8))
    }
}

/// RFC 3339 timestamps with milliseconds, in UTC.
public enum Timestamp {
    public static func format(_ date: Date) -> String {
        date.formatted(
            Date.ISO8601FormatStyle(includingFractionalSeconds: true, timeZone: .gmt))
    }
}
