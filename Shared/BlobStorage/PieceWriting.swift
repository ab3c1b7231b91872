import Foundation
import NIOCore

/// Cuts a request body into pieces of `BlobChunking.bytes`. The piece being filled grows as
/// bytes arrive: an upload that trickles holds what it sent, not a whole piece.
struct PieceCutter {
    private var piece = Data()

    /// The pieces `buffer` completes, in order.
    mutating func cut(_ buffer: ByteBuffer) -> [Data] {
        var full: [Data] = []
        var rest = buffer
        while rest.readableBytes > 0 {
            let take = min(rest.readableBytes, BlobChunking.bytes - piece.count)
            rest.withUnsafeReadableBytes { piece.append(contentsOf: $0.prefix(take)) }
            rest.moveReaderIndex(forwardBy: take)
            if piece.count == BlobChunking.bytes {
                full.append(piece)
                piece = Data()
            }
        }
        return full
    }

    /// The last piece, shorter than the others, once the body ended; nil when none is left.
    func last() -> Data? { piece.isEmpty ? nil : piece }
}

/// The pieces being written, each a child task of the write's group that returns where its
/// piece ends; they are settled oldest first, whatever order they finish in.
struct PiecesInFlight {
    /// Where each piece in flight ends, oldest first.
    private(set) var ends: [Int64] = []
    /// Pieces written before an older one.
    private var writtenEarly: Set<Int64> = []

    var isEmpty: Bool { ends.isEmpty }
    var count: Int { ends.count }

    mutating func add(
        _ piece: Data, at position: Int64, object: UUID, in store: any BlobStore, to group: inout ThrowingTaskGroup<Int64, any Error>
    ) {
        let end = position + Int64(piece.count)
        group.addTask {
            try await store.write(piece, object: object, at: position)
            return end
        }
        ends.append(end)
    }

    /// Waits for the oldest piece; returns where it ends. Throws its write's error, or that
    /// of a newer piece that failed first.
    mutating func settleOldest(in group: inout ThrowingTaskGroup<Int64, any Error>) async throws -> Int64 {
        let oldest = ends.removeFirst()
        while writtenEarly.remove(oldest) == nil {
            guard let end = try await group.next() else { break }
            writtenEarly.insert(end)
        }
        return oldest
    }
}
