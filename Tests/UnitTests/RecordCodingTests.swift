import Foundation
import SyncModels
@testable import SynclineClient
import Testing

/// Typed records to and from record data: a file is a file reference the server sees, and
/// a date keeps its milliseconds.
@Suite("Record coding")
struct RecordCodingTests {
    struct Recipe: SyncRecord, Equatable {
        static let collection = "recipes"
        var id: String
        var title: String
        var photo: BlobRef?
        var gallery: [BlobRef] = []
        var cookedAt: Date?
    }

    func local(_ data: [String: JSONValue]) -> LocalRecord {
        LocalRecord(
            collection: "recipes", id: "r1", data: data, version: 1, syncState: .synced, visibility: .private, publicID: nil, canFork: false,
            forkedFrom: nil)
    }

    static let photo = BlobRef(sha256: String(repeating: "ab", count: 32), size: 1234, contentType: "image/jpeg")

    struct Dish: SyncRecord, Equatable {
        static let collection = "dishes"
        enum CodingKeys: String, CodingKey { case id, title, tags, servings, note }
        static var defaults: KeyValuePairs<CodingKeys, JSONValue> { [.tags: [], .servings: 2] }
        var id: String
        var title: String
        var tags: [String] = []
        var servings: Int = 2
        var note: String?
    }

    /// A record an older version of the app wrote, without the fields added since: they
    /// read as their declared defaults, and a field without one is still missing.
    @Test func aMissingFieldReadsAsItsDeclaredDefault() throws {
        #expect(try RecordCoding.record(Dish.self, from: local(["title": "Soup"])) == Dish(id: "r1", title: "Soup"))
        #expect(try RecordCoding.record(Dish.self, from: local(["title": "Soup", "tags": .null, "servings": 4])).servings == 4,
                "null reads as the default, a value as itself")
        #expect(try RecordCoding.record(Dish.self, from: local(["title": "Soup", "tags": ["hot"]])).tags == ["hot"])
        #expect(throws: ClientError.self) { try RecordCoding.record(Dish.self, from: local(["tags": []])) }
    }

    @Test func aBlobRefPropertyIsAFileReferenceAndComesBack() throws {
        let recipe = Recipe(id: "r1", title: "Soup", photo: Self.photo, gallery: [Self.photo])
        let data = try RecordCoding.data(recipe)
        #expect(data["photo"] == Self.photo.json, "\(String(describing: data["photo"]))")
        #expect(JSONValue.object(data).blobReferences == [Self.photo, Self.photo], "the server and the upload hold see both")
        #expect(JSONValue.object(data).malformedBlobReferencePath("data") == nil)
        #expect(try RecordCoding.record(Recipe.self, from: local(data)) == recipe)
    }

    @Test func aBareReferenceFromBeforeStillDecodesAndAMalformedOneIsAFailure() throws {
        var data = try RecordCoding.data(Recipe(id: "r1", title: "Soup"))
        data["photo"] = ["sha256": .string(Self.photo.sha256), "size": 1234, "content_type": "image/jpeg"]
        #expect(try RecordCoding.record(Recipe.self, from: local(data)).photo == Self.photo)
        data["photo"] = ["$blob": ["sha256": "abc", "size": 1, "content_type": "image/jpeg"]]
        #expect(throws: ClientError.self) {
            try RecordCoding.record(Recipe.self, from: local(data))
        }
    }

    @Test func aDateKeepsItsMillisecondsAndReadsAnyOffset() throws {
        let now = Date()
        let data = try RecordCoding.data(Recipe(id: "r1", title: "Soup", cookedAt: now))
        let text = try #require(data["cookedAt"]?.stringValue)
        #expect(text.count == 24 && text.hasSuffix("Z") && text.contains("."), "\(text)")
        let back = try RecordCoding.record(Recipe.self, from: local(data))
        #expect(abs(try #require(back.cookedAt).timeIntervalSince(now)) <= 0.0005, "within half a millisecond: \(text)")
        var offset = data
        offset["cookedAt"] = "2026-11-22T10:00:00.250+01:00"
        let read = try RecordCoding.record(Recipe.self, from: local(offset))
        #expect(read.cookedAt == Date(timeIntervalSince1970: 1_795_338_000.25))
    }
}
