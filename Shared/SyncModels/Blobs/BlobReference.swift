import Foundation

/// A file referenced from a record's data: `{"$blob": {"sha256", "size", "content_type"}}`,
/// anywhere in the data. Files are stored by content (SHA-256) per space.
///
/// As `Codable` it is that reference too, so a typed record's `BlobRef` property is a file
/// the server sees (held for its upload, kept while referenced). It also decodes from the
/// bare `{"sha256", "size", "content_type"}` that typed records held before.
public struct BlobReference: Sendable, Hashable, Codable {
    public let sha256: String
    public let size: Int64
    public let contentType: String

    public static let key = "$blob"
    public static let maxContentTypeBytes = 255

    enum CodingKeys: String, CodingKey {
        case sha256, size
        case contentType = "content_type"
    }

    private enum ReferenceKeys: String, CodingKey {
        case blob = "$blob"
    }

    public init(from decoder: any Decoder) throws {
        let reference = try decoder.container(keyedBy: ReferenceKeys.self)
        let fields = reference.contains(.blob)
            ? try reference.nestedContainer(keyedBy: CodingKeys.self, forKey: .blob)
            : try decoder.container(keyedBy: CodingKeys.self)
        sha256 = try fields.decode(String.self, forKey: .sha256)
        size = try fields.decode(Int64.self, forKey: .size)
        contentType = try fields.decode(String.self, forKey: .contentType)
        guard Self.isValidSHA256(sha256), size >= 0, Self.isValidContentType(contentType) else {
            throw DecodingError.dataCorrupted(.init(
                codingPath: decoder.codingPath, debugDescription: "not a file reference: a SHA-256 of 64 lowercase hex digits, a size, a media type"))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var reference = encoder.container(keyedBy: ReferenceKeys.self)
        var fields = reference.nestedContainer(keyedBy: CodingKeys.self, forKey: .blob)
        try fields.encode(sha256, forKey: .sha256)
        try fields.encode(size, forKey: .size)
        try fields.encode(contentType, forKey: .contentType)
    }

    public init(sha256: String, size: Int64, contentType: String) {
        self.sha256 = sha256
        self.size = size
        self.contentType = contentType
    }

    /// The reference as it sits in record data.
    public var json: JSONValue {
        .object([Self.key: .object(["sha256": .string(sha256), "size": .int(size), "content_type": .string(contentType)])])
    }

    /// Whether `text` is a SHA-256 as files are named: 64 lowercase hex digits.
    public static func isValidSHA256(_ text: some StringProtocol) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    /// Whether `text` can be kept as a file's content type: a `type/subtype` media type
    /// (parameters allowed) of visible ASCII.
    public static func isValidContentType(_ text: String) -> Bool {
        let bytes = text.utf8
        guard (3...maxContentTypeBytes).contains(bytes.count), bytes.allSatisfy({ (0x20...0x7E).contains($0) }) else { return false }
        // `;;;` splits into an empty media type, not into nothing.
        let mediaType = text.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false)[0]
            .trimmingCharacters(in: .whitespaces)
        let parts = mediaType.split(separator: "/", omittingEmptySubsequences: false)
        let token: (Substring) -> Bool = { part in
            !part.isEmpty && part.utf8.allSatisfy { byte in
                (0x21...0x7E).contains(byte) && !"()<>@,;:\\\"/[]?={}".utf8.contains(byte)
            }
        }
        return parts.count == 2 && token(parts[0]) && token(parts[1])
    }

    /// Reads a reference as it sits in record data (`{"$blob": {…}}`); nil for anything else.
    public init?(json: JSONValue) {
        guard let fields = json.objectValue, fields.count == 1, let inner = fields[Self.key] else { return nil }
        self.init(inner)
    }

    /// Reads one `$blob` value; nil when it is not a well-formed reference.
    init?(_ value: JSONValue) {
        guard let fields = value.objectValue, fields.count == 3,
              let sha256 = fields["sha256"]?.stringValue, Self.isValidSHA256(sha256),
              let size = fields["size"]?.intValue, size >= 0,
              let contentType = fields["content_type"]?.stringValue, Self.isValidContentType(contentType)
        else { return nil }
        self.init(sha256: sha256, size: size, contentType: contentType)
    }
}

extension JSONValue {
    /// Every well-formed file reference in this value, in the order met.
    public var blobReferences: [BlobReference] {
        var walk = BlobReferenceWalk(tracksPaths: false)
        walk.visit(self, path: "")
        return walk.found
    }

    /// The path of the first `$blob` key whose value is not a well-formed reference (an
    /// object holding `$blob` holds nothing else).
    public func malformedBlobReferencePath(_ path: String) -> String? {
        var walk = BlobReferenceWalk(tracksPaths: true)
        walk.visit(self, path: path)
        return walk.malformed
    }
}

/// One walk over a JSON value, collecting references (and, when asked, where a malformed
/// one is: paths cost a string per step, which the apply path does not pay).
private struct BlobReferenceWalk {
    let tracksPaths: Bool
    var found: [BlobReference] = []
    var malformed: String?

    mutating func visit(_ value: JSONValue, path: @autoclosure () -> String) {
        switch value {
        case .object(let fields):
            if let inner = fields[BlobReference.key] {
                if fields.count == 1, let reference = BlobReference(inner) {
                    found.append(reference)
                    return
                }
                if tracksPaths, malformed == nil { malformed = "\(path()).\(BlobReference.key)" }
            }
            for (key, field) in fields where field.mayHoldBlobReference {
                if tracksPaths { visit(field, path: "\(path()).\(key)") } else { visit(field, path: "") }
            }
        case .array(let items):
            for (index, item) in items.enumerated() where item.mayHoldBlobReference {
                if tracksPaths { visit(item, path: "\(path())[\(index)]") } else { visit(item, path: "") }
            }
        default:
            return
        }
    }
}

extension Dictionary where Key == String, Value == JSONValue {
    /// The hashes of the files this record data references.
    public var referencedBlobs: Set<String> {
        var hashes = Set<String>()
        for value in values where value.mayHoldBlobReference {
            for reference in value.blobReferences { hashes.insert(reference.sha256) }
        }
        return hashes
    }
}

extension JSONValue {
    /// Whether an object anywhere inside has a `$blob` key (a file reference, or a malformed one).
    public var holdsBlobKey: Bool {
        switch self {
        case .object(let fields): return fields[BlobReference.key] != nil || fields.values.contains { $0.holdsBlobKey }
        case .array(let items): return items.contains { $0.holdsBlobKey }
        default: return false
        }
    }

    /// False for scalars: most fields are, and need no walk.
    public var mayHoldBlobReference: Bool {
        switch self {
        case .object, .array: return true
        default: return false
        }
    }
}
