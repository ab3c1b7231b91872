import ArgumentParser
import Auth
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import ServiceSupport

/// What clients that hold connections open cost the gateway's memory: `--readers`
/// downloads of a file of `--mb` that read nothing, then `--uploaders` uploads that send
/// one byte every two seconds. The gateway's resident memory is sampled before, while they
/// are held (`--hold` seconds, less than its TRANSFER_STALL_TIMEOUT) and after they are
/// gone. Run the gateway with DOWNLOADS_PER_USER and UPLOADS_PER_USER above the counts, so
/// that every connection is admitted: this measures what one admitted connection costs.
/// `--readers 0` or `--uploaders 0` measures the other kind alone, on a fresh gateway.
struct SlowClientBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "slow-clients", abstract: "Gateway memory under readers that read nothing and uploads that trickle.")

    @Option(help: "Gateway base URL.") var url = "http://127.0.0.1:8080"
    @Option(help: "Downloads that read nothing.") var readers = 200
    @Option(help: "Uploads that send a byte every two seconds.") var uploaders = 200
    @Option(help: "Megabytes of the file the readers ask for.") var mb = 30
    @Option(help: "Seconds the connections are held.") var hold = 15.0
    @Option(help: "The gateway's pid (default: the process named gateway).") var pid: String?
    @Option(help: "Instead of memory: hold the readers up to this many seconds, and report every 5 s how many the gateway has closed and what its send queues hold.")
    var watch: Double = 0

    func run() async throws {
        let configuration = try Configuration.fromEnvironment()
        let signer = try await TokenMinter(secret: try configuration.requireJWTSecret())
        guard let gateway = URL(string: url), let host = gateway.host else { throw ValidationError("bad --url") }
        let port = UInt16(gateway.port ?? 80)
        guard let pid = pid ?? Processes.named(["gateway"]).first?.pid else { throw ValidationError("no gateway process found; pass --pid") }
        let sampler = RSSSampler(pid: pid)
        let token = try await signer.sign(Claims(
            sub: "slow-\(UUID().uuidString.prefix(8).lowercased())", exp: Int64(Date().timeIntervalSince1970) + 3600))
        let file = GeneratedFile(bytes: Int64(mb) * 1_000_000)
        let (_, status) = try await onThread { try BlobTransfer.upload(host: host, port: port, token: token, file: file) }
        guard status == 201 || status == 200 else { throw ValidationError("the file's upload answered \(status)") }

        if readers > 0, watch > 0 {
            try await watchReaders(host: host, port: port, token: token, file: file)
        } else if readers > 0 {
            try await measureReaders(sampler, host: host, port: port, token: token, file: file)
        }
        if uploaders > 0 {
            try await measureUploaders(sampler, host: host, port: port, token: token)
        }
    }

    func measureReaders(_ sampler: RSSSampler, host: String, port: UInt16, token: String, file: GeneratedFile) async throws {
        try await measure("\(readers) readers of a \(mb) MB file that read nothing", sampler) {
            try (0..<readers).map { _ in
                let fd = try BlobTransfer.connect(host: host, port: port)
                let head = "GET /v1/blobs/\(file.sha256) HTTP/1.1\r\nHost: \(host)\r\nAuthorization: Bearer \(token)\r\n\r\n"
                try Array(head.utf8).withUnsafeBytes { try BlobTransfer.sendAll(fd, $0) }
                return fd
            }
        } trickle: { _ in }
    }

    /// Readers that read nothing, held until the gateway has closed them all or `watch`
    /// seconds pass: how many it has closed (the client sees the end of the connection,
    /// `POLLRDHUP`, whatever is still unread) and the bytes its sockets' send queues hold
    /// (`/proc/net/tcp`: what stalled readers pin in the kernel), every 5 s.
    func watchReaders(host: String, port: UInt16, token: String, file: GeneratedFile) async throws {
        let fds = try await onThread {
            try (0..<readers).map { _ in
                let fd = try BlobTransfer.connect(host: host, port: port)
                let head = "GET /v1/blobs/\(file.sha256) HTTP/1.1\r\nHost: \(host)\r\nAuthorization: Bearer \(token)\r\n\r\n"
                try Array(head.utf8).withUnsafeBytes { try BlobTransfer.sendAll(fd, $0) }
                return fd
            }
        }
        defer { for fd in fds { close(fd) } }
        let started = Date()
        while true {
            try await Task.sleep(for: .seconds(5))
            // POLLRDHUP (Linux; glibc defines it only with _GNU_SOURCE): the peer closed.
            let peerClosed: Int16 = 0x2000
            let ended: Int16 = peerClosed | Int16(POLLHUP) | Int16(POLLERR)
            var polled = fds.map { pollfd(fd: $0, events: peerClosed, revents: 0) }
            _ = poll(&polled, nfds_t(polled.count), 0)
            let closed = polled.filter { $0.revents & ended != 0 }.count
            let elapsed = Date().timeIntervalSince(started)
            print(String(
                format: "bench-slow-clients: %4.0f s: %d of %d stalled readers closed by the gateway; its send queues hold %.1f MB",
                elapsed, closed, fds.count, Double(Self.sendQueueBytes(port: port)) / 1_000_000))
            if closed == fds.count || elapsed >= watch { break }
        }
    }

    /// The bytes waiting in the send queues of the sockets on local `port` (this machine's).
    static func sendQueueBytes(port: UInt16) -> Int {
        var total = 0
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            guard let text = try? String(contentsOfFile: table, encoding: .utf8) else { continue }
            for line in text.split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ")
                guard fields.count > 4, let local = fields[1].split(separator: ":").last, UInt16(local, radix: 16) == port,
                      let queue = fields[4].split(separator: ":").first, let bytes = Int(queue, radix: 16)
                else { continue }
                total += bytes
            }
        }
        return total
    }

    func measureUploaders(_ sampler: RSSSampler, host: String, port: UInt16, token: String) async throws {
        try await measure("\(uploaders) uploads that send a byte every 2 s", sampler) {
            try (0..<uploaders).map { _ in
                let fd = try BlobTransfer.connect(host: host, port: port)
                let name = (0..<4).map { _ in String(format: "%016llx", UInt64.random(in: 0 ... .max)) }.joined()
                let head = "PUT /v1/blobs/\(name) HTTP/1.1\r\nHost: \(host)\r\nAuthorization: Bearer \(token)\r\n"
                    + "Content-Type: application/octet-stream\r\nContent-Length: \(Int64(mb) * 1_000_000)\r\n\r\nx"
                try Array(head.utf8).withUnsafeBytes { try BlobTransfer.sendAll(fd, $0) }
                return fd
            }
        } trickle: { fds in
            for fd in fds { _ = [UInt8(120)].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, 1, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) } }
        }
    }

    /// Opens the connections, holds them for `hold` seconds (calling `trickle` every two),
    /// closes them, and prints the gateway's memory before, at most while held, and after.
    func measure(
        _ name: String, _ sampler: RSSSampler, open: @escaping @Sendable () throws -> [Int32], trickle: @escaping @Sendable ([Int32]) -> Void
    ) async throws {
        try await Task.sleep(for: .seconds(3))
        let before = sampler.sample()
        sampler.start()
        let fds = try await onThread { try open() }
        let until = Date().addingTimeInterval(hold)
        while Date() < until {
            try await Task.sleep(for: .seconds(2))
            trickle(fds)
        }
        let peak = sampler.stop()
        for fd in fds { close(fd) }
        try await Task.sleep(for: .seconds(5))
        let after = sampler.sample()
        let perConnection = Double(peak - before) / Double(max(1, fds.count))
        print(String(
            format: "bench-slow-clients: %@: gateway RSS %.1f MB before, %.1f MB at most while held (+%.1f MB, %.0f KiB per connection), %.1f MB 5 s after they closed",
            name, Double(before) / 1024, Double(peak) / 1024, Double(peak - before) / 1024, perConnection, Double(after) / 1024))
    }
}
