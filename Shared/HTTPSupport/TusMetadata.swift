import Foundation

/// The tus 1.0 `Upload-Metadata` header: comma-separated pairs of a key and, after a
/// space, its value in Base64 (a key may stand alone, with an empty value).
public enum TusMetadata {
    /// The pairs, or nil when the header is malformed (a key repeated, a value that is not
    /// Base64 or not UTF-8).
    public static func parse(_ header: String) -> [String: String]? {
        var pairs: [String: String] = [:]
        for item in header.split(separator: ",") {
            let parts = item.split(separator: " ", omittingEmptySubsequences: true)
            guard (1...2).contains(parts.count), let key = parts.first, !key.isEmpty, pairs[String(key)] == nil else { return nil }
            var value = ""
            if parts.count == 2 {
                guard let data = Data(base64Encoded: String(parts[1])), let text = String(data: data, encoding: .utf8) else { return nil }
                value = text
            }
            pairs[String(key)] = value
        }
        return pairs
    }
}
