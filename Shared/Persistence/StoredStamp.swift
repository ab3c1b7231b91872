import Foundation
import SyncModels

/// How a record's write clock is stored. Every change writes it, so its size is WAL per op:
/// the text form, `<13-digit ms>-<5-digit counter>-<node> <op id>`, is 93 bytes when node and
/// op id are UUIDs, as they usually are (a device id, a client's op id). Such a stamp is
/// stored as `~` and 55 base64url characters of its 41 bytes: the milliseconds (6 bytes),
/// the counter with whether each UUID was written in capitals (3 bytes), and the two UUIDs
/// (16 bytes each). Any other stamp is stored as its text, which never starts with `~`.
///
/// The short form does not sort as the stamp does: the database never orders write clocks
/// (a pull picks a record's newest clock from the expanded text).
public enum StoredStamp {
    static let marker = UInt8(ascii: "~")
    private static let packedBytes = 41
    /// The marker and the base64url of the packed bytes (55 characters).
    private static let storedBytes = 1 + (packedBytes * 8 + 5) / 6

    /// The stored form of `stamp`.
    public static func text(_ stamp: Stamp) -> String {
        guard let hlc = HLC(stamp.hlc), hlc.description == stamp.hlc,
              let node = UUIDText(hlc.node), let op = UUIDText(stamp.opID)
        else { return stamp.description }
        var packed = Data(capacity: packedBytes)
        for shift in stride(from: 40, through: 0, by: -8) { packed.append(UInt8(truncatingIfNeeded: hlc.milliseconds >> shift)) }
        let word = UInt32(hlc.counter) | (node.capitals ? 1 << 23 : 0) | (op.capitals ? 1 << 22 : 0)
        packed += [UInt8(truncatingIfNeeded: word >> 16), UInt8(truncatingIfNeeded: word >> 8), UInt8(truncatingIfNeeded: word)]
        packed += node.bytes
        packed += op.bytes
        return String(decoding: [marker], as: UTF8.self) + Base64URL.encode(packed)
    }

    /// The stamp stored as `stored`; nil when it is not one.
    public static func stamp(_ stored: String) -> Stamp? {
        var text: [UInt8] = []
        return expand(stored.utf8, into: &text) ? Stamp(stored: String(decoding: text, as: UTF8.self)) : nil
    }

    /// Appends the text form of the stamp stored as `stored` to `out`; false when it is not
    /// a short form (a stamp stored as its text is copied as it is). A pull runs this for
    /// every record: it allocates nothing.
    @discardableResult
    static func expand<Bytes: Collection<UInt8>>(_ stored: Bytes, into out: inout [UInt8]) -> Bool {
        guard stored.first == marker else {
            out.append(contentsOf: stored)
            return true
        }
        guard stored.count == storedBytes else { return false }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: packedBytes + textBytes) { buffer in
            let packed = UnsafeMutableBufferPointer(rebasing: buffer[0..<packedBytes])
            guard Base64URL.decode(stored.dropFirst(), into: packed) else { return false }
            let milliseconds = packed[0..<6].reduce(Int64(0)) { $0 << 8 | Int64($1) }
            let word = packed[6..<9].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            let counter = word & 0x1_FFFF
            guard milliseconds <= 9_999_999_999_999, counter <= HLC.maxCounter else { return false }
            var text = TextCursor(UnsafeMutableBufferPointer(rebasing: buffer[packedBytes...]))
            text.digits(UInt64(milliseconds), width: 13)
            text.put(UInt8(ascii: "-"))
            text.digits(UInt64(counter), width: 5)
            text.put(UInt8(ascii: "-"))
            text.uuid(UnsafeBufferPointer(rebasing: packed[9..<25]), capitals: word & 1 << 23 != 0)
            text.put(UInt8(ascii: " "))
            text.uuid(UnsafeBufferPointer(rebasing: packed[25..<41]), capitals: word & 1 << 22 != 0)
            out.append(contentsOf: UnsafeBufferPointer(rebasing: text.buffer[0..<text.count]))
            return true
        }
    }

    /// The text form's length: 13 + 1 + 5 + 1 + 36 + 1 + 36.
    private static let textBytes = 93

    /// Writes a stamp's text into a buffer of its length.
    private struct TextCursor {
        let buffer: UnsafeMutableBufferPointer<UInt8>
        var count = 0

        init(_ buffer: UnsafeMutableBufferPointer<UInt8>) { self.buffer = buffer }

        mutating func put(_ byte: UInt8) {
            buffer[count] = byte
            count += 1
        }

        mutating func digits(_ value: UInt64, width: Int) {
            var rest = value
            for index in stride(from: count + width - 1, through: count, by: -1) {
                buffer[index] = UInt8(ascii: "0") + UInt8(rest % 10)
                rest /= 10
            }
            count += width
        }

        mutating func uuid(_ bytes: UnsafeBufferPointer<UInt8>, capitals: Bool) {
            let letters = capitals ? UInt8(ascii: "A") - 10 : UInt8(ascii: "a") - 10
            func digit(_ nibble: UInt8) -> UInt8 { nibble < 10 ? UInt8(ascii: "0") + nibble : letters + nibble }
            for (index, byte) in bytes.enumerated() {
                if index == 4 || index == 6 || index == 8 || index == 10 { put(UInt8(ascii: "-")) }
                put(digit(byte >> 4))
                put(digit(byte & 0x0F))
            }
        }
    }
}

/// A UUID in its 36-character text form, all in small letters or all in capitals (a form
/// the stored stamp can give back byte for byte).
private struct UUIDText {
    let bytes: [UInt8]
    let capitals: Bool

    /// Read here rather than by `UUID(uuidString:)`, which on Linux goes through `sscanf`:
    /// a worker stores a stamp for every op it writes.
    init?(_ text: String) {
        var bytes = [UInt8](repeating: 0, count: 16)
        var small = false, capital = false
        let valid = text.utf8.withContiguousStorageIfAvailable { utf8 -> Bool in
            guard utf8.count == 36 else { return false }
            var nibbles = 0
            for (index, character) in utf8.enumerated() {
                if index == 8 || index == 13 || index == 18 || index == 23 {
                    guard character == UInt8(ascii: "-") else { return false }
                    continue
                }
                let value: UInt8
                switch character {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): value = character - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): value = character - UInt8(ascii: "a") + 10; small = true
                case UInt8(ascii: "A")...UInt8(ascii: "F"): value = character - UInt8(ascii: "A") + 10; capital = true
                default: return false
                }
                bytes[nibbles / 2] |= nibbles % 2 == 0 ? value << 4 : value
                nibbles += 1
            }
            return true
        }
        guard valid == true, !(small && capital) else { return nil }
        self.bytes = bytes
        capitals = capital
    }
}
