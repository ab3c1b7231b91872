import ArgumentParser
import Auth
import Crypto
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import ServiceSupport
import SyncModels

/// Files through the gateway: one large upload (`PUT`) and its download, timed; then
/// `--concurrent` uploads of `--concurrent-mb` at once; and the gateway's resident memory
/// sampled while a file of `--rss-mb` is uploaded. Bodies are generated and streamed in
/// 1 MiB pieces, never held whole, so the load generator's own memory stays flat.
struct BlobBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "blobs", abstract: "Benchmark file uploads and downloads (MB/s, gateway memory).")

    @Option(help: "Gateway base URL.") var url = "http://127.0.0.1:8080"
    @Option(help: "Megabytes (10^6 bytes) of the large upload and download.") var mb = 100
    @Option(help: "Uploads at once in the concurrent run.") var concurrent = 20
    @Option(help: "Megabytes of each concurrent upload.") var concurrentMb = 5
    @Option(help: "Megabytes of the upload during which the gateway's memory is sampled (0: skip).") var rssMb = 1000

    func run() async throws {
        let configuration = try Configuration.fromEnvironment()
        let signer = try await TokenMinter(secret: try configuration.requireJWTSecret())
        guard let gateway = URL(string: url), let host = gateway.host else { throw ValidationError("bad --url") }
        let port = UInt16(gateway.port ?? 80)
        let user = "bbench-\(UUID().uuidString.prefix(8).lowercased())"
        let token = try await signer.sign(Claims(sub: user, exp: Int64(Date().timeIntervalSince1970) + 3600))

        let large = GeneratedFile(bytes: Int64(mb) * 1_000_000)
        let (uploadSeconds, status) = try await onThread { try BlobTransfer.upload(host: host, port: port, token: token, file: large) }
        guard status == 201 else { throw ValidationError("upload answered \(status)") }
        print(String(format: "bench-blobs: one %d MB upload in %.2f s: %.0f MB/s", mb, uploadSeconds, Double(mb) / uploadSeconds))
        let (downloadSeconds, received) = try await onThread {
            try BlobTransfer.download(host: host, port: port, token: token, sha256: large.sha256)
        }
        guard received == large.bytes else { throw ValidationError("downloaded \(received) of \(large.bytes) bytes") }
        print(String(format: "bench-blobs: one %d MB download in %.2f s: %.0f MB/s", mb, downloadSeconds, Double(mb) / downloadSeconds))

        let files = (0..<concurrent).map { _ in GeneratedFile(bytes: Int64(concurrentMb) * 1_000_000) }
        let started = Date()
        let latencies = try await withThrowingTaskGroup(of: Double.self) { group in
            for file in files {
                group.addTask {
                    let (seconds, status) = try await onThread { try BlobTransfer.upload(host: host, port: port, token: token, file: file) }
                    guard status == 201 else { throw ValidationError("a concurrent upload answered \(status)") }
                    return seconds
                }
            }
            return try await group.reduce(into: [Double]()) { $0.append($1) }.sorted()
        }
        let wall = Date().timeIntervalSince(started)
        print(String(
            format: "bench-blobs: %d concurrent %d MB uploads in %.2f s: %.0f MB/s in all; each p50 %.2f s, max %.2f s",
            concurrent, concurrentMb, wall, Double(concurrent * concurrentMb) / wall, latencies[latencies.count / 2], latencies.last!))

        guard rssMb > 0 else { return }
        guard let pid = Processes.named(["gateway"]).first?.pid else {
            print("bench-blobs: no gateway process on this machine; memory not sampled")
            return
        }
        let sampler = RSSSampler(pid: pid)
        let before = sampler.sample()
        sampler.start()
        let big = GeneratedFile(bytes: Int64(rssMb) * 1_000_000)
        let (bigSeconds, bigStatus) = try await onThread { try BlobTransfer.upload(host: host, port: port, token: token, file: big) }
        let peak = sampler.stop()
        guard bigStatus == 201 else { throw ValidationError("the memory run's upload answered \(bigStatus)") }
        print(String(
            format: "bench-blobs: gateway RSS during a %d MB upload (%.0f MB/s): %.1f MB before, %.1f MB at most, growth %.1f MB",
            rssMb, Double(rssMb) / bigSeconds, Double(before) / 1024, Double(peak) / 1024, Double(peak - before) / 1024))
    }
}

/// A file made of 1 MiB pieces, each a seeded pattern with its index: distinct for every
/// run, generated again for each pass instead of kept.
struct GeneratedFile: Sendable {
    let bytes: Int64
    let seed = UInt64.random(in: 0 ... .max)
    let sha256: String

    init(bytes: Int64) {
        self.bytes = bytes
        var hasher = SHA256()
        var piece = [UInt8](repeating: 0, count: 1 << 20)
        var offset: Int64 = 0
        var index: UInt64 = 0
        let seed = self.seed
        while offset < bytes {
            let count = Int(min(Int64(piece.count), bytes - offset))
            Self.fill(&piece, seed: seed, index: index)
            piece.withUnsafeBytes { hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: $0[..<count])) }
            offset += Int64(count)
            index += 1
        }
        sha256 = Hex.string(hasher.finalize())
    }

    static func fill(_ piece: inout [UInt8], seed: UInt64, index: UInt64) {
        var state = seed ^ (index &* 0x9E37_79B9_7F4A_7C15)
        piece.withUnsafeMutableBytes { raw in
            let words = raw.bindMemory(to: UInt64.self)
            for i in words.indices {
                state = state &* 6364136223846793005 &+ 1442695040888963407
                words[i] = state
            }
        }
    }

    /// Calls `body` with each piece in order (the last one cut to the file's end).
    func forEachPiece(_ body: (UnsafeRawBufferPointer) throws -> Void) rethrows {
        var piece = [UInt8](repeating: 0, count: 1 << 20)
        var offset: Int64 = 0
        var index: UInt64 = 0
        while offset < bytes {
            let count = Int(min(Int64(piece.count), bytes - offset))
            Self.fill(&piece, seed: seed, index: index)
            try piece.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[..<count])) }
            offset += Int64(count)
            index += 1
        }
    }
}

/// One request per connection, on a blocking socket: the body streamed in, or the answer
/// read and counted without being kept.
enum BlobTransfer {
    static func connect(host: String, port: UInt16) throws -> Int32 {
        var hints = addrinfo()
        hints.ai_family = AF_INET
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &result) == 0, let info = result else { throw POSIXError(.EHOSTUNREACH) }
        defer { freeaddrinfo(result) }
        let fd = socket(info.pointee.ai_family, info.pointee.ai_socktype, info.pointee.ai_protocol)
        guard fd >= 0, Glibc.connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 else {
            if fd >= 0 { close(fd) }
            throw POSIXError(.ECONNREFUSED)
        }
        return fd
    }

    static func sendAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws {
        var sent = 0
        while sent < bytes.count {
            let written = Glibc.send(fd, bytes.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL))
            guard written > 0 else { throw POSIXError(.EPIPE) }
            sent += written
        }
    }

    /// Reads the answer's head; returns the status, the content length and the body bytes
    /// already read past the head.
    static func readHead(_ fd: Int32) throws -> (status: Int, length: Int64, extra: Int) {
        var buffer = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { throw POSIXError(.ECONNRESET) }
            buffer.append(contentsOf: chunk[..<count])
            if let end = buffer.indices.dropLast(3).first(where: { buffer[$0] == 13 && buffer[$0 + 1] == 10 && buffer[$0 + 2] == 13 && buffer[$0 + 3] == 10 }) {
                let head = String(decoding: buffer[..<end], as: UTF8.self).split(separator: "\r\n")
                let status = Int(head.first?.split(separator: " ").dropFirst().first ?? "") ?? 0
                let length = head.first { $0.lowercased().hasPrefix("content-length:") }
                    .flatMap { Int64($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
                return (status, length, buffer.count - end - 4)
            }
        }
    }

    static func upload(host: String, port: UInt16, token: String, file: GeneratedFile) throws -> (Double, Int) {
        let fd = try connect(host: host, port: port)
        defer { close(fd) }
        let started = Date()
        let head = "PUT /v1/blobs/\(file.sha256) HTTP/1.1\r\nHost: \(host)\r\nAuthorization: Bearer \(token)\r\n"
            + "Content-Type: application/octet-stream\r\nContent-Length: \(file.bytes)\r\nConnection: close\r\n\r\n"
        try Array(head.utf8).withUnsafeBytes { try sendAll(fd, $0) }
        try file.forEachPiece { try sendAll(fd, $0) }
        let (status, _, _) = try readHead(fd)
        return (Date().timeIntervalSince(started), status)
    }

    static func download(host: String, port: UInt16, token: String, sha256: String) throws -> (Double, Int64) {
        let fd = try connect(host: host, port: port)
        defer { close(fd) }
        let started = Date()
        let head = "GET /v1/blobs/\(sha256) HTTP/1.1\r\nHost: \(host)\r\nAuthorization: Bearer \(token)\r\nConnection: close\r\n\r\n"
        try Array(head.utf8).withUnsafeBytes { try sendAll(fd, $0) }
        let (status, length, extra) = try readHead(fd)
        guard status == 200 else { throw POSIXError(.EBADMSG) }
        var received = Int64(extra)
        var chunk = [UInt8](repeating: 0, count: 1 << 20)
        while received < length {
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { break }
            received += Int64(count)
        }
        return (Date().timeIntervalSince(started), received)
    }
}

/// Samples a process's resident memory (VmRSS, KiB) every 20 ms on a thread of its own.
final class RSSSampler: @unchecked Sendable {
    // @unchecked: `peak` and `running` are guarded by `lock`.
    private let pid: String
    private let lock = NSLock()
    private var peak = 0
    private var running = false
    private var thread: Thread?

    init(pid: String) { self.pid = pid }

    func sample() -> Int {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS") })
        else { return 0 }
        return Int(line.split(whereSeparator: { $0 == " " || $0 == "\t" })[1]) ?? 0
    }

    func start() {
        lock.withLock { running = true; peak = sample() }
        let thread = Thread { [self] in
            while lock.withLock({ running }) {
                let now = sample()
                lock.withLock { peak = max(peak, now) }
                usleep(20_000)
            }
        }
        self.thread = thread
        thread.start()
    }

    /// Stops sampling; the highest sample seen.
    func stop() -> Int {
        lock.withLock {
            running = false
            return max(peak, sample())
        }
    }
}
