import Foundation

/// Base64url without padding (RFC 4648 §5): JWT segments, opaque page cursors.
public enum Base64URL {
    /// Written directly from the bytes (a worker encodes a stamp per op).
    public static func encode(_ data: Data) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((data.count * 8 + 5) / 6)
        var bits: UInt32 = 0, count = 0
        for byte in data {
            bits = bits << 8 | UInt32(byte)
            count += 8
            while count >= 6 {
                count -= 6
                out.append(alphabet[Int(bits >> UInt32(count) & 0x3F)])
            }
        }
        if count > 0 { out.append(alphabet[Int(bits << UInt32(6 - count) & 0x3F)]) }
        return String(decoding: out, as: UTF8.self)
    }

    public static func decode(_ text: some StringProtocol) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        let remainder = base64.count % 4
        if remainder == 1 { return nil }
        if remainder > 0 { base64 += String(repeating: "=", count: 4 - remainder) }
        return Data(base64Encoded: base64)
    }

    /// Fills `bytes` from `text`, which must be exactly their encoding; false otherwise.
    /// Allocates nothing (a pull decodes a stored stamp per record); inlinable, so that a
    /// caller in another module gets it specialized to its collection.
    @inlinable
    public static func decode(_ text: some Collection<UInt8>, into bytes: UnsafeMutableBufferPointer<UInt8>) -> Bool {
        guard text.count == (bytes.count * 8 + 5) / 6 else { return false }
        let values = Self.values
        var bits: UInt32 = 0, held = 0, filled = 0
        for char in text {
            let value = values[Int(char)]
            guard value != 0xFF else { return false }
            bits = bits << 6 | UInt32(value)
            held += 6
            if held >= 8 {
                held -= 8
                if filled < bytes.count {
                    bytes[filled] = UInt8(truncatingIfNeeded: bits >> UInt32(held))
                    filled += 1
                }
            }
        }
        return filled == bytes.count
    }

    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    /// Each byte's value in the alphabet, 0xFF for a byte outside it.
    @usableFromInline static let values: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, char) in alphabet.enumerated() { table[Int(char)] = UInt8(index) }
        return table
    }()
}

/// Lowercase hexadecimal, two digits a byte: digests, signatures, secrets.
public enum Hex {
    public static func string(_ bytes: some Sequence<UInt8>) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.underestimatedCount * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static let digits = Array("0123456789abcdef".utf8)

    /// The value of one hex digit (either case), or nil.
    public static func value(_ digit: UInt8) -> UInt8? {
        switch digit {
        case 48...57: return digit - 48
        case 97...102: return digit - 87
        case 65...70: return digit - 55
        default: return nil
        }
    }

    /// The bytes of an even-length hex string (either case), or nil.
    public static func bytes(_ text: some StringProtocol) -> [UInt8]? {
        let digits = Array(text.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(digits.count / 2)
        var index = 0
        while index < digits.count {
            guard let high = value(digits[index]), let low = value(digits[index + 1]) else { return nil }
            out.append(high << 4 | low)
            index += 2
        }
        return out
    }
}

/// Percent-decoding (RFC 3986 §2.1): URL user info and paths, and with `+` as a space,
/// `application/x-www-form-urlencoded` query values.
public enum PercentEncoding {
    /// The decoded bytes, or nil for a malformed escape.
    public static func decoded(_ text: some StringProtocol, plusAsSpace: Bool = false) -> [UInt8]? {
        var bytes: [UInt8] = []
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            switch byte {
            case UInt8(ascii: "+") where plusAsSpace: bytes.append(UInt8(ascii: " "))
            case UInt8(ascii: "%"):
                guard let high = iterator.next().flatMap(Hex.value), let low = iterator.next().flatMap(Hex.value) else {
                    return nil
                }
                bytes.append(high << 4 | low)
            default: bytes.append(byte)
            }
        }
        return bytes
    }
}
