/// The naming rules of collections, ids and public ids, checked without regular expressions on the hot path.
public enum Names {
    private static func isLower(_ b: UInt8) -> Bool { b >= 97 && b <= 122 }
    private static func isUpper(_ b: UInt8) -> Bool { b >= 65 && b <= 90 }
    private static func isDigit(_ b: UInt8) -> Bool { b >= 48 && b <= 57 }

    /// `^[a-z][a-z0-9_]{0,63}$`
    public static func isValidCollection(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard (1...64).contains(bytes.count), isLower(bytes[0]) else { return false }
        return bytes.allSatisfy { isLower($0) || isDigit($0) || $0 == UInt8(ascii: "_") }
    }

    /// `^[A-Za-z0-9_.:-]{1,128}$`
    public static func isValidRecordID(_ id: String) -> Bool {
        let bytes = Array(id.utf8)
        guard (1...128).contains(bytes.count) else { return false }
        return bytes.allSatisfy(isRecordIDByte)
    }

    private static func isRecordIDByte(_ b: UInt8) -> Bool {
        isLower(b) || isUpper(b) || isDigit(b) || b == UInt8(ascii: "_") || b == UInt8(ascii: ".")
            || b == UInt8(ascii: ":") || b == UInt8(ascii: "-")
    }

    /// A server mutator's name in a `call` op: `^[A-Za-z][A-Za-z0-9_.:-]{0,63}$`.
    public static func isValidCallName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard (1...64).contains(bytes.count), isLower(bytes[0]) || isUpper(bytes[0]) else { return false }
        return bytes.allSatisfy(isRecordIDByte)
    }

    /// `^[a-z0-9][a-z0-9-]{2,127}$`
    public static func isValidPublicID(_ id: String) -> Bool {
        let bytes = Array(id.utf8)
        guard (3...128).contains(bytes.count), isLower(bytes[0]) || isDigit(bytes[0]) else { return false }
        return bytes.allSatisfy { isLower($0) || isDigit($0) || $0 == UInt8(ascii: "-") }
    }

    /// Text without control characters (C0, DEL, C1): what a name, a platform, a URL or a
    /// user id may hold. NUL in particular would be cut by libpq and change the text.
    public static func isPlainText(_ text: String) -> Bool {
        text.unicodeScalars.allSatisfy { $0.value >= 0x20 && !(0x7F...0x9F).contains($0.value) }
    }

    /// The node part of an HLC: a device id, same alphabet as record ids.
    public static func isValidHLCNode(_ node: String) -> Bool { isValidRecordID(node) }

    /// A UUID in any case; `canonicalUUID` gives the lowercase form ops are ordered by.
    public static func canonicalUUID(_ text: String) -> String? {
        let bytes = Array(text.utf8)
        guard bytes.count == 36 else { return nil }
        for (index, byte) in bytes.enumerated() {
            if [8, 13, 18, 23].contains(index) {
                guard byte == UInt8(ascii: "-") else { return nil }
            } else {
                let isHex = isDigit(byte) || (byte >= 97 && byte <= 102) || (byte >= 65 && byte <= 70)
                guard isHex else { return nil }
            }
        }
        return text.lowercased()
    }
}
