import Foundation

/// A value bound as a text-format query parameter. Queries are always parameterized:
/// no value is ever spliced into SQL text.
public protocol PGBindable: Sendable {
    var pgText: String { get }
}

extension String: PGBindable { public var pgText: String { self } }
extension Int: PGBindable { public var pgText: String { String(self) } }
extension Int64: PGBindable { public var pgText: String { String(self) } }
extension Int32: PGBindable { public var pgText: String { String(self) } }
extension Double: PGBindable { public var pgText: String { String(self) } }
extension Bool: PGBindable { public var pgText: String { self ? "t" : "f" } }
extension UUID: PGBindable { public var pgText: String { uuidString.lowercased() } }

/// What an array parameter holds: its element as array-literal text, nil for NULL.
public protocol PGTextArrayElement: Sendable {
    var pgArrayElement: String? { get }
}

extension String: PGTextArrayElement { public var pgArrayElement: String? { self } }
extension Int: PGTextArrayElement { public var pgArrayElement: String? { String(self) } }
extension Int64: PGTextArrayElement { public var pgArrayElement: String? { String(self) } }
extension Bool: PGTextArrayElement { public var pgArrayElement: String? { self ? "t" : "f" } }
extension Optional: PGTextArrayElement where Wrapped: PGTextArrayElement {
    // A switch, not `flatMap(\.pgArrayElement)`: a key path in this generic context is
    // instantiated anew for every element, which once cost the worker a third of its CPU.
    public var pgArrayElement: String? {
        switch self {
        case .some(let wrapped): wrapped.pgArrayElement
        case .none: nil
        }
    }
}

extension Array: PGBindable where Element: PGTextArrayElement {
    /// PostgreSQL array literal: every element quoted, NULL for nil. Built byte by byte
    /// (the escapes are ASCII), as the worker's batch statements bind thousands of values.
    public var pgText: String {
        let quote = UInt8(ascii: "\""), backslash = UInt8(ascii: "\\")
        var bytes: [UInt8] = [UInt8(ascii: "{")]
        // Not `enumerated()`: in this generic context its `(offset, element)` tuple's type
        // is looked up at run time for every element.
        var first = true
        for element in self {
            if !first { bytes.append(UInt8(ascii: ",")) }
            first = false
            guard var text = element.pgArrayElement else {
                bytes += "NULL".utf8
                continue
            }
            bytes.append(quote)
            text.withUTF8 { utf8 in
                // Copied in runs between the characters that need a backslash.
                var start = 0
                for index in utf8.indices where utf8[index] == quote || utf8[index] == backslash {
                    bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start..<index]))
                    bytes.append(backslash)
                    start = index
                }
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start...]))
            }
            bytes.append(quote)
        }
        bytes.append(UInt8(ascii: "}"))
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// A query result copied out of libpq: text values, nil for SQL NULL.
public struct PGResult: Sendable {
    public let columns: [String]
    public let rows: [PGRow]
    public let affectedRows: Int

    public var first: PGRow? { rows.first }
}

public struct PGRow: Sendable {
    public let columns: [String]
    public let values: [String?]

    public subscript(index: Int) -> String? { values[index] }

    public subscript(name: String) -> String? {
        guard let index = columns.firstIndex(of: name) else { return nil }
        return values[index]
    }

    public func string(_ name: String) throws(PGError) -> String {
        guard let value = self[name] else { throw Self.missing(name) }
        return value
    }

    public func int(_ name: String) throws(PGError) -> Int64 {
        guard let text = self[name], let value = Int64(text) else { throw Self.missing(name) }
        return value
    }

    public func optionalInt(_ name: String) -> Int64? { self[name].flatMap { Int64($0) } }

    public func bool(_ name: String) throws(PGError) -> Bool {
        guard let text = self[name] else { throw Self.missing(name) }
        return text == "t"
    }

    public func isNull(_ name: String) -> Bool { self[name] == nil }

    private static func missing(_ name: String) -> PGError {
        PGError(code: .decoding, message: "column \(name) is missing, NULL or not of the expected type")
    }
}
