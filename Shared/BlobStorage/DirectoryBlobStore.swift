import Foundation
import NIOCore
import NIOPosix

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Files in a directory (`BLOB_STORE=file:<dir>`). An object is written to
/// `staging/<object>`, fsync'd, then renamed to `<first two hex digits>/<sha256>-<object>`
/// and the directory fsync'd: a sealed file is whole or absent, after a crash too. The
/// system calls run on NIO's blocking thread pool, never on the cooperative one.
public struct DirectoryBlobStore: BlobStore {
    public let root: URL

    /// Makes the directory (and its `staging` folder) when missing.
    public init(root: URL) throws {
        self.root = root
        try FileManager.default.createDirectory(at: root.appendingPathComponent("staging"), withIntermediateDirectories: true)
    }

    public var kind: BlobStoreKind { .file }

    func stagingPath(_ object: UUID) -> String {
        root.appendingPathComponent("staging").appendingPathComponent(object.uuidString.lowercased()).path
    }

    func sealedPath(_ object: UUID, sha256: String) -> String {
        root.appendingPathComponent(String(sha256.prefix(2)))
            .appendingPathComponent("\(sha256)-\(object.uuidString.lowercased())").path
    }

    public func truncate(object: UUID, to offset: Int64) async throws {
        let path = stagingPath(object)
        try await blocking {
            let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o640)
            guard fd >= 0 else { throw Self.failure("open", path) }
            defer { close(fd) }
            var status = stat()
            guard fstat(fd, &status) == 0 else { throw Self.failure("stat", path) }
            if Int64(status.st_size) > offset, ftruncate(fd, off_t(offset)) != 0 { throw Self.failure("truncate", path) }
        }
    }

    public func write(_ bytes: Data, object: UUID, at offset: Int64) async throws {
        let path = stagingPath(object)
        try await blocking {
            let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o640)
            guard fd >= 0 else { throw Self.failure("open", path) }
            defer { close(fd) }
            try bytes.withUnsafeBytes { buffer in
                var done = 0
                while done < buffer.count {
                    let written = pwrite(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset + Int64(done)))
                    if written < 0 {
                        if errno == EINTR { continue }
                        throw Self.failure("write", path)
                    }
                    done += written
                }
            }
        }
    }

    public func sync(object: UUID) async throws {
        let path = stagingPath(object)
        try await blocking { try Self.fsync(path) }
    }

    public func seal(object: UUID, sha256: String) async throws {
        let staged = stagingPath(object)
        let sealed = sealedPath(object, sha256: sha256)
        try await blocking {
            // An empty file was never written to: its staging file is made here.
            let fd = open(staged, O_WRONLY | O_CREAT | O_CLOEXEC, 0o640)
            guard fd >= 0 else { throw Self.failure("open", staged) }
            defer { close(fd) }
            guard Glibc.fsync(fd) == 0 else { throw Self.failure("fsync", staged) }
            let folder = (sealed as NSString).deletingLastPathComponent
            if mkdir(folder, 0o750) != 0 && errno != EEXIST { throw Self.failure("mkdir", folder) }
            guard rename(staged, sealed) == 0 else { throw Self.failure("rename", staged) }
            try Self.fsync(folder)
        }
    }

    public func read(
        object: UUID, sha256: String, sealed: Bool, range: Range<Int64>, pieceBytes: Int,
        into consume: (ByteBuffer) async throws -> Void
    ) async throws {
        guard !range.isEmpty else { return }
        let path = sealed ? sealedPath(object, sha256: sha256) : stagingPath(object)
        let fd = try await blocking {
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { throw Self.failure("open", path) }
            return fd
        }
        defer { close(fd) }
        var position = range.lowerBound
        while position < range.upperBound {
            let count = Int(min(Int64(pieceBytes), range.upperBound - position))
            let at = position
            let piece = try await blocking {
                var piece = ByteBufferAllocator().buffer(capacity: count)
                var read = 0
                piece.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { bytes in
                    read = pread(fd, bytes.baseAddress!, count, off_t(at))
                    return max(0, read)
                }
                guard read > 0 else { throw read == 0 ? BlobStoreError.missingBytes(object: object, at: at) : Self.failure("read", path) }
                return piece
            }
            position += Int64(piece.readableBytes)
            try await consume(piece)
        }
    }

    public func remove(object: UUID, sha256: String) async throws {
        let paths = [stagingPath(object), sealedPath(object, sha256: sha256)]
        try await blocking {
            for path in paths where unlink(path) != 0 && errno != ENOENT { throw Self.failure("unlink", path) }
        }
    }

    private func blocking<T: Sendable>(_ body: @Sendable @escaping () throws -> T) async throws -> T {
        try await NIOThreadPool.singleton.runIfActive(body)
    }

    private static func fsync(_ path: String) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw failure("open", path) }
        defer { close(fd) }
        guard Glibc.fsync(fd) == 0 else { throw failure("fsync", path) }
    }

    private static func failure(_ call: String, _ path: String) -> BlobStoreError {
        .io("\(call) \(path): \(String(cString: strerror(errno)))")
    }
}
