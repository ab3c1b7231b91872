import HTTPSupport
import SyncModels
import Testing

/// The pure rules of attachments: references in data, ranges, tus metadata, sizes.
@Suite("Attachment rules")
struct AttachmentRulesTests {
    let sha = String(repeating: "ab", count: 32)

    func reference(_ sha256: String, size: Int64 = 10, type: String = "image/png") -> JSONValue {
        BlobReference(sha256: sha256, size: size, contentType: type).json
    }

    @Test func referencesAreFoundAnywhereInDataAndCountedOncePerRecord() {
        let other = String(repeating: "cd", count: 32)
        let data: [String: JSONValue] = [
            "photo": reference(sha),
            "steps": .array([.object(["text": .string("stir"), "photo": reference(other)]), reference(sha)]),
            "title": .string("Soup"),
        ]
        #expect(JSONValue.object(data).blobReferences.map(\.sha256).sorted() == [sha, sha, other].sorted())
        #expect(data.referencedBlobs == [sha, other])
        #expect(["title": JSONValue.string("$blob")].referencedBlobs.isEmpty)
    }

    @Test func aMalformedReferenceIsNamedByItsPath() {
        let cases: [(JSONValue, String?)] = [
            (.object(["photo": reference(sha)]), nil),
            (.object(["photo": .object(["$blob": .object(["sha256": .string(sha)])])]), "data.photo.$blob"),
            (.object(["list": .array([.string("x"), .object(["$blob": .string("nope")])])]), "data.list[1].$blob"),
            (.object(["p": .object(["$blob": reference(sha).objectValue!["$blob"]!, "extra": .int(1)])]), "data.p.$blob"),
            (.object(["p": reference(sha.uppercased())]), "data.p.$blob"),
            (.object(["p": reference(sha, size: -1)]), "data.p.$blob"),
            (.object(["p": reference(sha, type: "not a type")]), "data.p.$blob"),
        ]
        for (value, path) in cases { #expect(value.malformedBlobReferencePath("data") == path, "\(value)") }
    }

    @Test func contentTypesAreMediaTypes() {
        for good in ["image/jpeg", "application/pdf", "text/plain; charset=utf-8", "application/vnd.api+json"] {
            #expect(BlobReference.isValidContentType(good), "\(good)")
        }
        for bad in ["", "image", "image/", "/png", "image/png/x", "imäge/png", "a b/c", ";;;", "; image/png", String(repeating: "a", count: 300) + "/b"] {
            #expect(!BlobReference.isValidContentType(bad), "\(bad)")
        }
    }

    @Test func rangeHeadersAsRFC9110ReadsThem() {
        let size: Int64 = 1000
        let cases: [(String?, ByteRangeRequest)] = [
            (nil, .whole),
            ("bytes=0-99", .part(0..<100)),
            ("bytes=990-2000", .part(990..<1000)),
            ("bytes=900-", .part(900..<1000)),
            ("bytes=-10", .part(990..<1000)),
            ("bytes=-5000", .part(0..<1000)),
            ("bytes=1000-", .unsatisfiable),
            ("bytes=-0", .unsatisfiable),
            ("bytes=5-1", .whole),
            ("bytes=0-1,5-6", .whole),
            ("items=0-1", .whole),
            ("bytes=x-1", .whole),
        ]
        for (header, expected) in cases { #expect(ByteRangeRequest(header: header, size: size) == expected, "\(header ?? "nil")") }
        #expect(ByteRangeRequest(header: "bytes=-1", size: 0) == .unsatisfiable)
    }

    @Test func tusMetadataPairsAreBase64() {
        #expect(TusMetadata.parse("sha256 YWJj,content_type aW1hZ2UvcG5n,flag") == ["sha256": "abc", "content_type": "image/png", "flag": ""])
        #expect(TusMetadata.parse("a YWJj,a YWJj") == nil, "a key twice")
        #expect(TusMetadata.parse("a ***") == nil, "not Base64")
        #expect(TusMetadata.parse("") == [:])
    }

    @Test func sizesAsConfigurationSpellsThem() {
        #expect(ByteSizes.parse("100MiB") == Int64(100) << 20)
        #expect(ByteSizes.parse("5GiB") == Int64(5) << 30)
        #expect(ByteSizes.parse("10MB") == 10_000_000)
        #expect(ByteSizes.parse("4096") == 4096)
        for bad in ["", "0", "-1MiB", "lots", "99999999999TiB"] { #expect(ByteSizes.parse(bad) == nil, "\(bad)") }
    }
}
