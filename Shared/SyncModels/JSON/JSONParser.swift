/// A direct JSON reader and writer for `JSONValue`: the hot paths (every push body, every
/// job's ops, every record) go through these instead of Codable, which on Linux spends
/// most of its time building coding paths and errors for a value of unknown type.
public enum JSONParser {
    public struct Failure: Error, Equatable {
        public let offset: Int
    }

    static let maxDepth = 256

    public static func parse(_ bytes: some Collection<UInt8>) throws(Failure) -> JSONValue {
        let buffer = Array(bytes)
        var reader = Reader(bytes: buffer)
        reader.skipWhitespace()
        let value = try reader.value(depth: 0)
        reader.skipWhitespace()
        guard reader.index == buffer.count else { throw Failure(offset: reader.index) }
        return value
    }

    public static func parse(_ text: String) throws(Failure) -> JSONValue {
        try parse(text.utf8)
    }

    struct Reader {
        let bytes: [UInt8]
        var index = 0

        mutating func skipWhitespace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x0A, 0x0D, 0x09: index += 1
                default: return
                }
            }
        }

        func fail() -> Failure { Failure(offset: index) }

        mutating func expect(_ literal: StaticString) throws(Failure) {
            let count = literal.utf8CodeUnitCount
            guard index + count <= bytes.count else { throw fail() }
            let matches = literal.withUTF8Buffer { literalBytes in
                (0..<count).allSatisfy { bytes[index + $0] == literalBytes[$0] }
            }
            guard matches else { throw fail() }
            index += count
        }

        mutating func value(depth: Int) throws(Failure) -> JSONValue {
            guard depth < JSONParser.maxDepth, index < bytes.count else { throw fail() }
            switch bytes[index] {
            case UInt8(ascii: "{"): return try object(depth: depth)
            case UInt8(ascii: "["): return try array(depth: depth)
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"): try expect("true"); return .bool(true)
            case UInt8(ascii: "f"): try expect("false"); return .bool(false)
            case UInt8(ascii: "n"): try expect("null"); return .null
            default: return try number()
            }
        }

        mutating func object(depth: Int) throws(Failure) -> JSONValue {
            index += 1
            var result: [String: JSONValue] = [:]
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") { index += 1; return .object(result) }
            while true {
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw fail() }
                let key = try string()
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw fail() }
                index += 1
                skipWhitespace()
                result[key] = try value(depth: depth + 1)
                skipWhitespace()
                guard index < bytes.count else { throw fail() }
                if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                if bytes[index] == UInt8(ascii: "}") { index += 1; return .object(result) }
                throw fail()
            }
        }

        mutating func array(depth: Int) throws(Failure) -> JSONValue {
            index += 1
            var result: [JSONValue] = []
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") { index += 1; return .array(result) }
            while true {
                skipWhitespace()
                result.append(try value(depth: depth + 1))
                skipWhitespace()
                guard index < bytes.count else { throw fail() }
                if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                if bytes[index] == UInt8(ascii: "]") { index += 1; return .array(result) }
                throw fail()
            }
        }

        mutating func hex4() throws(Failure) -> UInt32 {
            guard index + 4 <= bytes.count else { throw fail() }
            var value: UInt32 = 0
            for _ in 0..<4 {
                guard let digit = Hex.value(bytes[index]) else { throw fail() }
                value = value << 4 | UInt32(digit)
                index += 1
            }
            return value
        }

        mutating func string() throws(Failure) -> String {
            index += 1
            let start = index
            // Fast path: no escapes.
            var ascii = true
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    // Invalid UTF-8 is refused, never replaced: text reaches storage unaltered.
                    // ASCII is valid UTF-8 as it stands, so only other text is validated (the
                    // validating initializer is generic, unspecialized and far slower).
                    let text: String
                    if ascii {
                        text = String(decoding: bytes[start..<index], as: UTF8.self)
                    } else {
                        guard let valid = String(validating: bytes[start..<index], as: UTF8.self) else { throw fail() }
                        text = valid
                    }
                    index += 1
                    return text
                }
                if byte == UInt8(ascii: "\\") || byte < 0x20 { break }
                if byte >= 0x80 { ascii = false }
                index += 1
            }
            var scalars = Array(bytes[start..<index])
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    guard let text = String(validating: scalars, as: UTF8.self) else { throw fail() }
                    index += 1
                    return text
                }
                guard byte >= 0x20 else { throw fail() }
                if byte != UInt8(ascii: "\\") {
                    scalars.append(byte)
                    index += 1
                    continue
                }
                index += 1
                try escaped(into: &scalars)
            }
            throw fail()
        }

        /// The character the escape after a backslash stands for, appended as UTF-8.
        mutating func escaped(into scalars: inout [UInt8]) throws(Failure) {
            guard index < bytes.count else { throw fail() }
            let escape = bytes[index]
            index += 1
            switch escape {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): scalars.append(escape)
            case UInt8(ascii: "b"): scalars.append(0x08)
            case UInt8(ascii: "f"): scalars.append(0x0C)
            case UInt8(ascii: "n"): scalars.append(0x0A)
            case UInt8(ascii: "r"): scalars.append(0x0D)
            case UInt8(ascii: "t"): scalars.append(0x09)
            case UInt8(ascii: "u"):
                var code = try hex4()
                if (0xD800...0xDBFF).contains(code) {
                    guard index + 6 <= bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else { throw fail() }
                    index += 2
                    let low = try hex4()
                    guard (0xDC00...0xDFFF).contains(low) else { throw fail() }
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                }
                guard let scalar = Unicode.Scalar(code) else { throw fail() }
                scalars.append(contentsOf: Array(String(Character(scalar)).utf8))
            default: throw fail()
            }
        }

        mutating func number() throws(Failure) -> JSONValue {
            let start = index
            var isInteger = true
            if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
            let digitsStart = index
            while index < bytes.count, (48...57).contains(bytes[index]) { index += 1 }
            guard index > digitsStart else { throw fail() }
            if bytes[digitsStart] == 48 && index - digitsStart > 1 { throw fail() }  // leading zero
            if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
                isInteger = false
                index += 1
                let fraction = index
                while index < bytes.count, (48...57).contains(bytes[index]) { index += 1 }
                guard index > fraction else { throw fail() }
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
                isInteger = false
                index += 1
                if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
                let exponent = index
                while index < bytes.count, (48...57).contains(bytes[index]) { index += 1 }
                guard index > exponent else { throw fail() }
            }
            let text = String(decoding: bytes[start..<index], as: UTF8.self)
            if isInteger, let value = Int64(text) { return .int(value) }
            guard let value = Double(text), value.isFinite else { throw fail() }
            return .double(value)
        }
    }
}

public enum JSONWriter {
    /// Compact JSON with sorted keys and unescaped slashes — the encoding whose size the
    /// data limit counts and the database stores.
    public static func bytes(_ value: JSONValue) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        write(value, into: &out)
        return out
    }

    public static func string(_ value: JSONValue) -> String {
        String(decoding: bytes(value), as: UTF8.self)
    }

    static func write(_ value: JSONValue, into out: inout [UInt8]) {
        switch value {
        case .null: out.append(contentsOf: Array("null".utf8))
        case .bool(let flag): out.append(contentsOf: Array((flag ? "true" : "false").utf8))
        case .int(let number): out.append(contentsOf: Array(String(number).utf8))
        case .double(let number):
            if number.rounded() == number && abs(number) < 1e15 {
                out.append(contentsOf: Array(String(Int64(number)).utf8))
            } else {
                out.append(contentsOf: Array("\(number)".utf8))
            }
        case .string(let text): writeString(text, into: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                write(item, into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let fields):
            out.append(UInt8(ascii: "{"))
            for (index, key) in fields.keys.sorted().enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                writeString(key, into: &out)
                out.append(UInt8(ascii: ":"))
                write(fields[key]!, into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    public static func writeString(_ text: String, into out: inout [UInt8]) {
        let written = text.utf8.withContiguousStorageIfAvailable { bytes in
            writeString(utf8: UnsafeRawBufferPointer(bytes), into: &out)
        }
        if written == nil { Array(text.utf8).withUnsafeBytes { writeString(utf8: $0, into: &out) } }
    }

    /// Appends UTF-8 text as a JSON string (a pull writes PostgreSQL's text this way,
    /// without making a `String` of it first).
    public static func writeString(utf8 bytes: UnsafeRawBufferPointer, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        // Most text needs no escape: one scan, then one copy.
        guard bytes.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) else {
            out.append(contentsOf: bytes)
            out.append(UInt8(ascii: "\""))
            return
        }
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: [0x5C, 0x22])
            case UInt8(ascii: "\\"): out.append(contentsOf: [0x5C, 0x5C])
            case 0x0A: out.append(contentsOf: [0x5C, UInt8(ascii: "n")])
            case 0x0D: out.append(contentsOf: [0x5C, UInt8(ascii: "r")])
            case 0x09: out.append(contentsOf: [0x5C, UInt8(ascii: "t")])
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                out.append(contentsOf: [0x5C, UInt8(ascii: "u"), 48, 48, hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
