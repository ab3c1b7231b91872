import Foundation
import PQBridge

/// Files in PostgreSQL: an object is rows of `blob_chunks`, one per piece, each written in
/// a statement of its own, so a file is never whole in memory and a long upload holds no
/// connection between pieces.
public struct PostgresBlobStore: BlobStore {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    public var kind: BlobStoreKind { .postgres }

    public func truncate(object: UUID, to offset: Int64) async throws {
        try await pool.execute("DELETE FROM blob_chunks WHERE object_id = \(object) AND start_offset >= \(offset)")
    }

    public func write(_ bytes: Data, object: UUID, at offset: Int64) async throws {
        guard !bytes.isEmpty else { return }
        try await pool.execute(
            "INSERT INTO blob_chunks (object_id, start_offset, data) VALUES (\(object), \(offset), \(bytes))")
    }

    /// Every piece was committed as it was written.
    public func sync(object: UUID) async throws {}

    /// The rows are the object, sealed or not.
    public func seal(object: UUID, sha256: String) async throws {}

    public func read(
        object: UUID, sha256: String, sealed: Bool, range: Range<Int64>, into consume: (Data) async throws -> Void
    ) async throws {
        var position = range.lowerBound
        // No piece is longer than `BlobChunking.bytes`: the one holding `position` starts
        // less than that before it.
        var after = position - Int64(BlobChunking.bytes)
        while position < range.upperBound {
            let rows = try await pool.execute("""
                SELECT start_offset, data FROM blob_chunks
                WHERE object_id = \(object) AND start_offset > \(after) AND start_offset < \(range.upperBound)
                ORDER BY start_offset LIMIT 4
                """)
            if rows.isEmpty { throw BlobStoreError.missingBytes(object: object, at: position) }
            for row in rows {
                let (start, data) = try row.decode((Int64, Data).self)
                after = start
                let end = start + Int64(data.count)
                guard end > position else { continue }
                guard start <= position else { throw BlobStoreError.missingBytes(object: object, at: position) }
                let from = Int(position - start)
                let to = Int(min(end, range.upperBound) - start)
                try await consume(data.subdata(in: data.startIndex + from..<data.startIndex + to))
                position = start + Int64(to)
                if position >= range.upperBound { return }
            }
        }
    }

    public func remove(object: UUID, sha256: String) async throws {
        try await pool.execute("DELETE FROM blob_chunks WHERE object_id = \(object)")
    }
}

public enum BlobStoreError: Error, CustomStringConvertible {
    case missingBytes(object: UUID, at: Int64)
    case io(String)

    public var description: String {
        switch self {
        case .missingBytes(let object, let offset): return "object \(object) has no bytes at offset \(offset)"
        case .io(let message): return message
        }
    }
}
