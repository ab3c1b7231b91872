import Foundation
import NIOCore
import NIOFoundationCompat
import PQBridge
import ServiceSupport

/// Which store holds an object's bytes (the `store` column of a file).
public enum BlobStoreKind: String, Sendable, CaseIterable {
    case postgres
    case file
}

/// Where files' bytes are kept. An object is written once, in order, by one writer, then
/// sealed under its hash and read many times; removing it is the sweeper's alone.
public protocol BlobStore: Sendable {
    var kind: BlobStoreKind { get }
    /// Drops whatever an interrupted writer left past `offset` of an unsealed object.
    func truncate(object: UUID, to offset: Int64) async throws
    /// Writes `bytes` at `offset` of an unsealed object (the offset is where the last
    /// write, or `truncate`, ended).
    func write(_ bytes: Data, object: UUID, at offset: Int64) async throws
    /// Makes what was written so far durable.
    func sync(object: UUID) async throws
    /// Makes a whole, durable object readable as the file with this hash.
    func seal(object: UUID, sha256: String) async throws
    /// Reads `range` of an object, sealed or not, in pieces of at most `pieceBytes`, each in
    /// a buffer of its own that the consumer may keep: a download hands it to the
    /// connection as it is.
    func read(
        object: UUID, sha256: String, sealed: Bool, range: Range<Int64>, pieceBytes: Int,
        into consume: (ByteBuffer) async throws -> Void
    ) async throws
    /// Removes an object, sealed or not; nothing when it is gone already.
    func remove(object: UUID, sha256: String) async throws
}

/// The size of the pieces files are written and read in: large enough that a 100 MB file
/// is a hundred statements or system calls, small enough that a request holds little.
public enum BlobChunking {
    public static let bytes = 1 << 20
}

extension BlobStore {
    /// Reads `range` in pieces of `BlobChunking.bytes`.
    public func read(object: UUID, sha256: String, sealed: Bool, range: Range<Int64>, into consume: (Data) async throws -> Void) async throws {
        try await read(object: object, sha256: sha256, sealed: sealed, range: range, pieceBytes: BlobChunking.bytes) {
            try await consume(Data(buffer: $0, byteTransferStrategy: .noCopy))
        }
    }
}

/// The stores a process can read from, and the one new files go to (`BLOB_STORE`).
public struct BlobStores: Sendable {
    public let writing: any BlobStore
    let others: [any BlobStore]

    public init(writing: any BlobStore, others: [any BlobStore] = []) {
        self.writing = writing
        self.others = others
    }

    /// The store of that kind, when this process has it.
    public func store(_ kind: BlobStoreKind) -> (any BlobStore)? {
        writing.kind == kind ? writing : others.first { $0.kind == kind }
    }
}

/// `BLOB_STORE`: `postgres` (the default) or `file:<directory>`.
public enum BlobStoreLocation: Sendable, Equatable {
    case postgres
    case directory(String)

    public init?(_ text: String) {
        if text == "postgres" {
            self = .postgres
        } else if text.hasPrefix("file:"), text.count > "file:".count, text.dropFirst("file:".count).hasPrefix("/") {
            self = .directory(String(text.dropFirst("file:".count)))
        } else {
            return nil
        }
    }

}

extension EnvironmentReader {
    /// `BLOB_STORE`, read the same way by every executable that stores or removes files.
    public func blobStore() throws(Configuration.Invalid) -> BlobStoreLocation {
        guard let location = BlobStoreLocation(value("BLOB_STORE") ?? "postgres") else {
            throw Configuration.Invalid(description: "BLOB_STORE must be postgres or file:<absolute directory>")
        }
        return location
    }
}

extension BlobStores {
    /// New files go to `location`; files already in PostgreSQL stay readable either way.
    public init(_ location: BlobStoreLocation, pool: PGPool) throws {
        let postgres = PostgresBlobStore(pool: pool)
        switch location {
        case .postgres:
            self.init(writing: postgres)
        case .directory(let path):
            self.init(writing: try DirectoryBlobStore(root: URL(fileURLWithPath: path)), others: [postgres])
        }
    }
}
