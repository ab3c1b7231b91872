import Foundation
import NIOCore
import PQBridge

/// Files in PostgreSQL: an object is rows of `blob_chunks` of at most `rowBytes` each,
/// stored in the table's own pages (no TOAST: a 1 MiB value would be cut into 512 TOAST
/// rows, each with an index entry — measured 1.5 times slower to insert). A piece of up to
/// `BlobChunking.bytes` is one statement that PostgreSQL cuts into rows, so a file is never
/// whole in memory and a long upload holds no connection between pieces.
public struct PostgresBlobStore: BlobStore {
    let pool: PGPool

    /// A row and its page header fit one 8 KiB page.
    static let rowBytes = 8000

    public init(pool: PGPool) { self.pool = pool }

    public var kind: BlobStoreKind { .postgres }

    public func truncate(object: UUID, to offset: Int64) async throws {
        // Pieces are written whole, one statement each, and offsets only ever stand at a
        // piece's end: no row straddles `offset`.
        try await pool.execute("DELETE FROM blob_chunks WHERE object_id = \(object) AND start_offset >= \(offset)")
    }

    /// Committed without waiting for the WAL to reach the disk: the commit that makes the
    /// object a file (or advances an upload) waits, and it flushes every earlier record.
    public func write(_ bytes: Data, object: UUID, at offset: Int64) async throws {
        guard !bytes.isEmpty else { return }
        let rowBytes = Int32(Self.rowBytes)
        try await pool.transaction { connection in
            try connection.execute("SET LOCAL synchronous_commit = off")
            try connection.execute("""
                INSERT INTO blob_chunks (object_id, start_offset, data)
                SELECT \(object), \(offset) + n::bigint * \(rowBytes), substring(p.bytes FROM n * \(rowBytes) + 1 FOR \(rowBytes))
                FROM (SELECT \(bytes)::bytea AS bytes) p, generate_series(0, (length(p.bytes) - 1) / \(rowBytes)) AS n
                """)
        }
    }

    public func sync(object: UUID) async throws {}

    /// The rows are the object, sealed or not.
    public func seal(object: UUID, sha256: String) async throws {}

    public func read(
        object: UUID, sha256: String, sealed: Bool, range: Range<Int64>, pieceBytes: Int,
        into consume: (ByteBuffer) async throws -> Void
    ) async throws {
        var position = range.lowerBound
        let perQuery = max(1, (pieceBytes + Self.rowBytes - 1) / Self.rowBytes) + 1
        while position < range.upperBound {
            let pieceEnd = min(range.upperBound, position + Int64(pieceBytes))
            var piece = ByteBufferAllocator().buffer(capacity: Int(pieceEnd - position))
            // No row is longer than `rowBytes`: the one holding `position` starts less than
            // that before it. A query reads a piece's worth of rows and one more, so that a
            // piece starting inside a row comes from one query.
            var after = position - Int64(Self.rowBytes)
            while position < pieceEnd {
                // The rows are let go before the piece is handed on: a reader that stops
                // reading holds the piece alone.
                let rows = try await pool.execute("""
                    SELECT start_offset, data FROM blob_chunks
                    WHERE object_id = \(object) AND start_offset > \(after) AND start_offset < \(pieceEnd)
                    ORDER BY start_offset LIMIT \(perQuery)
                    """)
                if rows.isEmpty { throw BlobStoreError.missingBytes(object: object, at: position) }
                for row in rows {
                    let (start, data) = try row.decode((Int64, Data).self)
                    after = start
                    let end = start + Int64(data.count)
                    guard end > position else { continue }
                    guard start <= position else { throw BlobStoreError.missingBytes(object: object, at: position) }
                    let from = Int(position - start)
                    let to = Int(min(end, pieceEnd) - start)
                    data.withUnsafeBytes { piece.writeBytes(UnsafeRawBufferPointer(rebasing: $0[from..<to])) }
                    position = start + Int64(to)
                    if position >= pieceEnd { break }
                }
            }
            try await consume(piece)
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
