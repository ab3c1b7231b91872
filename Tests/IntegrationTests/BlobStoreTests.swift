import BlobStorage
import Foundation
import NIOCore
import PQBridge
import Persistence
import SyncModels
import Testing

/// The same suite over both stores: pieces written in order, read back in any range,
/// a cut write truncated and resumed, sealing, removal.
@Suite("Blob stores", .enabled(if: TestEnvironment.hasServers), .serialized, .timeLimit(.minutes(2)))
struct BlobStoreTests {
    enum Kind: String, CaseIterable, Sendable { case postgres, file }

    func withStore(_ kind: Kind, _ body: (any BlobStore) async throws -> Void) async throws {
        try await withPool { pool in
            _ = try await Migrations.apply(on: pool, logger: TestEnvironment.logger)
            switch kind {
            case .postgres:
                try await body(PostgresBlobStore(pool: pool))
            case .file:
                let root = FileManager.default.temporaryDirectory.appendingPathComponent("store-\(UUID().uuidString)")
                defer { try? FileManager.default.removeItem(at: root) }
                try await body(try DirectoryBlobStore(root: root))
            }
        }
    }

    static func bytes(_ count: Int, seed: UInt8) -> Data { Data((0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31) &+ seed }) }

    func readAll(_ store: any BlobStore, _ object: UUID, sealed: Bool, _ range: Range<Int64>) async throws -> Data {
        var data = Data()
        try await store.read(object: object, sha256: "ab" + String(repeating: "0", count: 62), sealed: sealed, range: range) {
            #expect($0.count <= BlobChunking.bytes)
            data.append($0)
        }
        return data
    }

    @Test(arguments: Kind.allCases)
    func piecesReadBackInAnyRange(kind: Kind) async throws {
        try await withStore(kind) { store in
            let object = UUID()
            let sha = "ab" + String(repeating: "0", count: 62)
            let first = Self.bytes(BlobChunking.bytes, seed: 1), second = Self.bytes(300_000, seed: 2)
            try await store.write(first, object: object, at: 0)
            try await store.write(second, object: object, at: Int64(first.count))
            try await store.sync(object: object)
            let whole = first + second
            #expect(try await readAll(store, object, sealed: false, 0..<Int64(whole.count)) == whole)
            try await store.seal(object: object, sha256: sha)
            for range in [0..<1, 0..<Int64(whole.count), 1_048_000..<1_048_700, Int64(whole.count - 1)..<Int64(whole.count)] {
                let part = try await readAll(store, object, sealed: true, range)
                #expect(part == whole.subdata(in: Int(range.lowerBound)..<Int(range.upperBound)), "\(range)")
            }
            // Small pieces that start inside the store's rows, as a download reads them.
            var pieces: [Int] = []
            var part = Data()
            try await store.read(object: object, sha256: sha, sealed: true, range: 5_000..<200_000, pieceBytes: 16_384) {
                pieces.append($0.readableBytes)
                part.append(contentsOf: $0.readableBytesView)
            }
            #expect(part == whole.subdata(in: 5_000..<200_000))
            #expect(pieces.allSatisfy { $0 <= 16_384 } && pieces.count == (195_000 + 16_383) / 16_384, "\(pieces)")
            try await store.remove(object: object, sha256: sha)
            try await store.remove(object: object, sha256: sha)
            await #expect(throws: (any Error).self) { _ = try await readAll(store, object, sealed: true, 0..<1) }
        }
    }

    @Test(arguments: Kind.allCases)
    func aCutWriteIsTruncatedAndResumed(kind: Kind) async throws {
        try await withStore(kind) { store in
            let object = UUID()
            let kept = Self.bytes(1000, seed: 3), torn = Self.bytes(500, seed: 4), resumed = Self.bytes(700, seed: 5)
            try await store.write(kept, object: object, at: 0)
            try await store.write(torn, object: object, at: 1000)
            // The offset recorded was 1000: the torn piece goes.
            try await store.truncate(object: object, to: 1000)
            try await store.write(resumed, object: object, at: 1000)
            #expect(try await readAll(store, object, sealed: false, 0..<1700) == kept + resumed)
            try await store.remove(object: object, sha256: "ab" + String(repeating: "0", count: 62))
        }
    }

    /// A client killed mid-upload resumes while the gateway still stores the cut request's
    /// last piece: when that piece lands first, the resumed request is a conflict (409, the
    /// client asks for the offset again), never a failure.
    @Test func aPieceStoredFirstByACutRequestIsAConflict() async throws {
        try await withPool(size: 4) { pool in
            _ = try await Migrations.apply(on: pool, logger: TestEnvironment.logger)
            let user = UserID.unique("tus")
            let space = try await SpaceStore(pool: pool).personalSpace(user: user)
            let catalog = BlobCatalog(pool: pool)
            let store = PostgresBlobStore(pool: pool)
            let ingest = BlobIngest(catalog: catalog, stores: BlobStores(writing: store), maxBytes: 1 << 30, spaceQuota: 1 << 40)
            let piece = Self.bytes(BlobChunking.bytes, seed: 7)
            guard case .created(let upload) = try await catalog.createUpload(
                user: user, space: space, sha256: "cd" + String(repeating: "0", count: 62), contentType: "application/octet-stream",
                length: Int64(piece.count * 2), store: "postgres", expiresIn: 3600, quota: 1 << 40, maxOpen: 10)
            else {
                Issue.record("the upload was not created")
                return
            }
            let (body, feed) = AsyncStream<ByteBuffer>.makeStream()
            let resumed = Task { try await ingest.append(upload, at: 0, body: body, expiresIn: 3600) }
            try await Task.sleep(for: .milliseconds(500))  // the resumed request has truncated past its offset
            try await store.write(piece, object: upload.uploadID, at: 0)  // the cut request's piece lands
            feed.yield(ByteBuffer(bytes: piece))
            feed.finish()
            #expect(try await resumed.value == .conflict)
            try await ingest.end(upload)
        }
    }
}
