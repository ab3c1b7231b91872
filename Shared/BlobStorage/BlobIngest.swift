import Crypto
import Foundation
import NIOCore
import PQBridge
import Persistence
import SyncModels

/// Takes files in: a whole file (`PUT`) or a resumable upload's pieces (tus), hashed as
/// they stream through, written in pieces of `BlobChunking.bytes` (up to `piecesInFlight`
/// at once; the request body waits while that many are being written), sealed, then made
/// the space's file. A refused file leaves nothing behind: its object is removed before
/// the answer.
public struct BlobIngest: Sendable {
    let catalog: BlobCatalog
    let stores: BlobStores
    /// The largest file taken (`BLOB_MAX_BYTES`).
    public let maxBytes: Int64
    /// The bytes a space's files may take (`SPACE_BLOB_QUOTA`).
    public let spaceQuota: Int64
    /// How long a whole-file upload may take before its object counts as abandoned.
    static let putAbandonedAfter: Double = 6 * 3600

    public init(catalog: BlobCatalog, stores: BlobStores, maxBytes: Int64, spaceQuota: Int64) {
        self.catalog = catalog
        self.stores = stores
        self.maxBytes = maxBytes
        self.spaceQuota = spaceQuota
    }

    /// The store new files go to (`BLOB_STORE`).
    public var writingStore: String { stores.writing.kind.rawValue }

    public enum Outcome: Sendable, Equatable {
        case created(BlobCatalog.StoredBlob)
        case existing(BlobCatalog.StoredBlob)
        /// The bytes hash to `actual`, not to the name they were sent under.
        case mismatch(actual: String)
        /// More than `maxBytes`.
        case tooLarge
        /// The space's files would exceed the quota.
        case overQuota
        case spaceGone
        /// The uploader can no longer write to the space.
        case notWritable
        /// Took so long that the object was removed as abandoned.
        case abandoned
    }

    /// Stores one whole file sent as `body` by `user`.
    public func put<Body: AsyncSequence>(space: SpaceID, user: UserID, sha256: String, contentType: String, body: Body) async throws -> Outcome
    where Body.Element == ByteBuffer {
        let store = stores.writing
        let object = try await catalog.beginObject(sha256: sha256, store: store.kind.rawValue, abandonAfter: Self.putAbandonedAfter)
        do {
            var hasher = SHA256()
            let size = try await write(body, to: object, in: store, at: 0, limit: maxBytes) { buffer in buffer.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) } }
            guard let size else {
                try await discard(object, sha256: sha256, in: store)
                return .tooLarge
            }
            let actual = Hex.string(hasher.finalize())
            guard actual == sha256 else {
                try await discard(object, sha256: sha256, in: store)
                return .mismatch(actual: actual)
            }
            return try await finish(
                object: object, in: store, space: space, user: user, sha256: sha256, size: size, contentType: contentType)
        } catch {
            try? await discard(object, sha256: sha256, in: store)
            throw error
        }
    }

    public enum Appended: Sendable, Equatable {
        /// The upload's offset now.
        case advanced(Int64)
        /// Another request moved the offset first, or the upload expired.
        case conflict
        /// The body holds more than the upload's length.
        case exceedsLength
    }

    /// Appends `body` to a resumable upload at `offset` (which must be where it stands),
    /// advancing its offset after every piece, so a cut connection loses at most the piece
    /// under way.
    public func append<Body: AsyncSequence>(_ upload: BlobCatalog.Upload, at offset: Int64, body: Body, expiresIn: Double) async throws -> Appended
    where Body.Element == ByteBuffer {
        guard let kind = BlobStoreKind(rawValue: upload.store), let store = stores.store(kind) else {
            throw BlobStoreError.io("the upload's store (\(upload.store)) is not configured here")
        }
        // A request cut before it could advance the offset may have left bytes past it.
        try await store.truncate(object: upload.uploadID, to: offset)
        var position = offset
        var lost = false
        let written: Int64?
        do {
            written = try await write(body, to: upload.uploadID, in: store, at: offset, limit: upload.length - offset) { _ in } afterPiece: { end in
                guard try await catalog.advance(upload: upload.uploadID, from: position, to: end, expiresIn: expiresIn) else {
                    lost = true
                    return false
                }
                position = end
                return true
            }
        } catch let error as PGError where error.isUniqueViolation {
            // A request cut earlier (its client gone, its last piece still being stored)
            // wrote the same piece first: that request moved the offset, not this one.
            return .conflict
        }
        if lost { return .conflict }
        try await store.sync(object: upload.uploadID)
        return written == nil ? .exceedsLength : .advanced(position)
    }

    /// Ends a resumable upload whose bytes are all in: hashes them, seals the object and
    /// makes it the space's file, or removes it.
    public func complete(_ upload: BlobCatalog.Upload) async throws -> Outcome {
        guard let kind = BlobStoreKind(rawValue: upload.store), let store = stores.store(kind) else {
            throw BlobStoreError.io("the upload's store (\(upload.store)) is not configured here")
        }
        var hasher = SHA256()
        try await store.read(object: upload.uploadID, sha256: upload.sha256, sealed: false, range: 0..<upload.length) {
            hasher.update(data: $0)
        }
        let actual = Hex.string(hasher.finalize())
        guard actual == upload.sha256 else {
            try await catalog.endUpload(upload.uploadID)
            try await discard(upload.uploadID, sha256: upload.sha256, in: store)
            return .mismatch(actual: actual)
        }
        return try await finish(
            object: upload.uploadID, in: store, space: upload.spaceID, user: upload.userID,
            sha256: upload.sha256, size: upload.length, contentType: upload.contentType, upload: upload.uploadID)
    }

    /// Ends a resumable upload unfinished (tus termination): its bytes are removed at once.
    public func end(_ upload: BlobCatalog.Upload) async throws {
        try await catalog.endUpload(upload.uploadID)
        guard !upload.finished, let kind = BlobStoreKind(rawValue: upload.store), let store = stores.store(kind) else { return }
        try await discard(upload.uploadID, sha256: upload.sha256, in: store)
    }

    private func finish(
        object: UUID, in store: any BlobStore, space: SpaceID, user: UserID, sha256: String, size: Int64, contentType: String,
        upload: UUID? = nil
    ) async throws -> Outcome {
        try await store.seal(object: object, sha256: sha256)
        let finished = try await catalog.finish(
            object: object, space: space, user: user, sha256: sha256, size: size, contentType: contentType,
            store: store.kind.rawValue, quota: spaceQuota, upload: upload)
        switch finished {
        case .created(let blob):
            return .created(blob)
        case .existing(let blob):
            try await discard(object, sha256: sha256, in: store)
            return .existing(blob)
        case .overQuota:
            try await discard(object, sha256: sha256, in: store)
            return .overQuota
        case .spaceGone:
            try await discard(object, sha256: sha256, in: store)
            return .spaceGone
        case .notWritable:
            try await discard(object, sha256: sha256, in: store)
            return .notWritable
        case .abandoned:
            return .abandoned
        }
    }

    /// Pieces being written at once: while the oldest is stored, up to three more are
    /// written beside it (PostgreSQL's or the disk's parallelism) and the body keeps coming.
    static let piecesInFlight = 4

    /// Writes `body` in pieces from `offset`; returns the bytes written, or nil once they
    /// would exceed `limit` (what was written stays, for the caller to discard).
    /// `afterPiece` is told, in order, where each written piece ends, and may stop the
    /// writing. The pieces in flight are child tasks of this call.
    private func write<Body: AsyncSequence>(
        _ body: Body, to object: UUID, in store: any BlobStore, at offset: Int64, limit: Int64,
        onBytes: (ByteBuffer) -> Void, afterPiece: (Int64) async throws -> Bool = { _ in true }
    ) async throws -> Int64? where Body.Element == ByteBuffer {
        try await withThrowingTaskGroup(of: Int64.self) { group in
            var inFlight = PiecesInFlight(), cutter = PieceCutter()
            var position = offset, total: Int64 = 0
            /// False when `afterPiece` stops the writing.
            func send(_ piece: Data) async throws -> Bool {
                inFlight.add(piece, at: position, object: object, in: store, to: &group)
                position += Int64(piece.count)
                guard inFlight.count == Self.piecesInFlight else { return true }
                return try await afterPiece(try await inFlight.settleOldest(in: &group))
            }
            func readBody() async throws -> Int64? {
                for try await buffer in body {
                    total += Int64(buffer.readableBytes)
                    if total > limit { return nil }  // the group waits for the pieces in flight
                    onBytes(buffer)
                    for piece in cutter.cut(buffer) {
                        guard try await send(piece) else { return total }
                    }
                }
                if let last = cutter.last() {
                    guard try await send(last) else { return total }
                }
                while !inFlight.isEmpty {
                    guard try await afterPiece(try await inFlight.settleOldest(in: &group)) else { return total }
                }
                return total
            }
            do {
                let written = try await readBody()
                if written != nil { group.cancelAll() }  // what `afterPiece` stopped
                return written
            } catch {
                // The body was cut: the whole pieces already sent are kept (and counted), in order.
                while !inFlight.isEmpty {
                    guard let end = try? await inFlight.settleOldest(in: &group), (try? await afterPiece(end)) == true else { break }
                }
                group.cancelAll()
                throw error
            }
        }
    }

    /// Removes an object that will not be a file, at once.
    private func discard(_ object: UUID, sha256: String, in store: any BlobStore) async throws {
        try await store.remove(object: object, sha256: sha256)
        try await catalog.forgetDiscarded(object)
    }
}
