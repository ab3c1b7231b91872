import Crypto
import Foundation
import Persistence
import SyncModels

/// Moves files from one store to another (`syncctl blobs migrate`) while the service runs:
/// each object is copied to a new object in the target store, sealed, and its files are
/// pointed at the copy in one transaction; the old object becomes garbage and is removed.
/// A reader meets either the old object or the new, both whole.
public struct BlobMigration: Sendable {
    let catalog: BlobCatalog
    let from: any BlobStore
    let to: any BlobStore

    public init(catalog: BlobCatalog, from: any BlobStore, to: any BlobStore) {
        self.catalog = catalog
        self.from = from
        self.to = to
    }

    public struct Moved: Sendable {
        public var objects = 0
        public var bytes: Int64 = 0
        /// Objects that could not be read from the old store (left where they are).
        public var unreadable: [(sha256: String, error: String)] = []
    }

    /// Moves every object (of one space's files, when given); one that cannot be read is
    /// left where it is and reported, and the others still move.
    public func run(space: SpaceID? = nil, batch: Int = 100) async throws -> Moved {
        var moved = Moved()
        var after: UUID?
        while true {
            let pending = try await catalog.objects(in: from.kind.rawValue, space: space, after: after, limit: batch)
            if pending.isEmpty { return moved }
            for item in pending {
                after = item.object
                let copy = try await catalog.beginObject(sha256: item.sha256, store: to.kind.rawValue, abandonAfter: 3600)
                do {
                    var position: Int64 = 0
                    try await from.read(object: item.object, sha256: item.sha256, sealed: true, range: 0..<item.size) { piece in
                        try await to.write(piece, object: copy, at: position)
                        position += Int64(piece.count)
                    }
                    try await to.seal(object: copy, sha256: item.sha256)
                } catch {
                    try? await to.remove(object: copy, sha256: item.sha256)
                    try await catalog.forgetDiscarded(copy)
                    moved.unreadable.append((item.sha256, "\(error)"))
                    continue
                }
                if try await catalog.move(object: item.object, to: copy, in: to.kind.rawValue) {
                    try await from.remove(object: item.object, sha256: item.sha256)
                    try await catalog.forgetGarbage(item.object)
                    moved.objects += 1
                    moved.bytes += item.size
                } else {
                    try await to.remove(object: copy, sha256: item.sha256)
                    try await catalog.forgetDiscarded(copy)
                }
            }
        }
    }
}

/// Reads files back and checks them against their names (`syncctl blobs verify`).
public struct BlobVerifier: Sendable {
    let stores: BlobStores

    public init(stores: BlobStores) { self.stores = stores }

    /// nil when the file's bytes are whole and hash to its name; else what is wrong.
    public func problem(with blob: BlobCatalog.StoredBlob) async -> String? {
        guard let kind = BlobStoreKind(rawValue: blob.store), let store = stores.store(kind) else {
            return "its store (\(blob.store)) is not configured here"
        }
        var hasher = SHA256()
        var size: Int64 = 0
        do {
            try await store.read(object: blob.objectID, sha256: blob.sha256, sealed: true, range: 0..<blob.size) { piece in
                hasher.update(data: piece)
                size += Int64(piece.count)
            }
        } catch {
            return "unreadable: \(error)"
        }
        let actual = Hex.string(hasher.finalize())
        if size != blob.size { return "\(size) bytes, not \(blob.size)" }
        if actual != blob.sha256 { return "its bytes hash to \(actual)" }
        return nil
    }
}
