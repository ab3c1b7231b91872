import ArgumentParser
import Auth
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Logging
import PQBridge
import ServiceSupport
import SyncModels

/// Poke latency: opens many streams on fanout (Server-Sent Events, or WebSockets with
/// `--websocket`), pushes from one device per user at a
/// fixed rate, and measures commit → delivered for every poke (the job's `finished_at`,
/// set inside the applying transaction, to the moment the poke's bytes arrive here).
/// With `--space-members N`, the users are the N members of one shared space, each
/// streaming it from `--streams` devices and pushing to it from the first of them: every
/// push pokes all the other devices of every member.
struct StreamBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "streams", abstract: "Benchmark poke latency over many open streams (gateway + workers + fanout).")

    @Option(help: "Gateway base URL.") var url = "http://127.0.0.1:8080"
    @Option(help: "Fanout base URL.") var fanout = "http://127.0.0.1:8081"
    @Option(help: "Users.") var users = 100
    @Option(help: "Streaming devices per user (one more device per user pushes).") var streams = 10
    @Option(help: "Pushes in all.") var pushes = 300
    @Option(help: "Pushes per second.") var rate = 20.0
    @Option(help: "Members of one shared space instead of separate users (0: separate users).") var spaceMembers = 0
    @Flag(help: "Streams as WebSockets instead of Server-Sent Events.") var websocket = false

    func run() async throws {
        let configuration = try Configuration.fromEnvironment()
        let signer = try await TokenMinter(secret: try configuration.requireJWTSecret())
        guard let fanoutURL = URL(string: fanout), let fanoutHost = fanoutURL.host, let gatewayURL = URL(string: url),
              let gatewayHost = gatewayURL.host
        else { throw ValidationError("bad --url or --fanout") }
        let listening = users * streams
        let allowed = DescriptorLimit.raise(to: UInt64(listening + 1024))
        guard allowed > listening + 100 else {
            throw ValidationError("\(listening) streams need more open files than the \(allowed) this process may have (run as root)")
        }

        let run = UUID().uuidString.prefix(8).lowercased()
        let client = BenchClient(base: url)
        let members = spaceMembers > 0 ? spaceMembers : users
        var pushers: [(user: String, token: String, device: String)] = []
        var listeners: [(user: String, token: String, device: String)] = []
        for u in 0..<members {
            let user = "streams-\(run)-\(u)"
            let token = try await signer.sign(Claims(sub: user, exp: Int64(Date().timeIntervalSince1970) + 3600))
            var devices: [String] = []
            for _ in 0..<streams { devices.append(try await client.registerDevice(token)) }
            // In a space, a member pushes from one of their streaming devices; otherwise
            // from a device of its own.
            pushers.append((user, token, spaceMembers > 0 ? devices[0] : try await client.registerDevice(token)))
            listeners += devices.map { (user, token, $0) }
        }
        var space: String?
        if spaceMembers > 0 {
            let owner = pushers[0]
            let id = try await client.field("space_id", "POST", "/v1/spaces", token: owner.token, body: #"{"name":"bench"}"#, expected: 201)
            for member in pushers.dropFirst() {
                let code = try await client.field(
                    "code", "POST", "/v1/spaces/\(id)/invitations", token: owner.token, body: #"{"role":"editor"}"#, expected: 201)
                _ = try await client.field("space_id", "POST", "/v1/invitations/\(code)/accept", token: member.token, body: nil, expected: 200)
            }
            space = id
        }
        // In a space every member hears the same cursor: one key for all of them.
        let before = Processes.residentKilobytes("fanout")
        let reader = try PokeReader(host: fanoutHost, port: UInt16(fanoutURL.port ?? 80), webSocket: websocket, streams: listeners.map {
            (user: space ?? $0.user, path: "/v1/stream?device_id=\($0.device)&access_token=\($0.token)" + (space.map { "&space_id=\($0)" } ?? ""))
        })
        let opened = try await reader.waitForHellos(within: 60 + Double(listening) / 500)
        let shape = space == nil ? "\(users) users × \(streams)" : "one space: \(spaceMembers) members × \(streams)"
        print("bench-streams: \(opened) \(websocket ? "WebSocket" : "SSE") streams open (\(shape)), \(pushes) pushes at \(rate)/s")
        if let before, let open = Processes.residentKilobytes("fanout") {
            print(String(
                format: "fanout resident: %.1f MB before the streams, %.1f MB with them open → %.1f KB per open stream",
                Double(before) / 1024, Double(open) / 1024, Double(open - before) / Double(opened)))
        }
        // Each push pokes: every stream of its user (separate users), or every stream of
        // the space but the pushing device's.
        let expectedPerPush = space == nil ? streams : listeners.count - 1

        // Push at the fixed rate, one op each, from a round-robin of users.
        let connection = RawHTTPConnection(host: gatewayHost, port: UInt16(gatewayURL.port ?? 80))
        var jobs: [String: String] = [:]  // job id → user
        let started = Date()
        for i in 0..<pushes {
            let due = started.addingTimeInterval(Double(i) / rate)
            if due > Date() { try await Task.sleep(for: .seconds(due.timeIntervalSinceNow)) }
            let pusher = pushers[i % pushers.count]
            let sample = try PushBench.push(connection, pusher.token, pusher.device, user: pusher.user, ops: 1, sequence: i, space: space)
            jobs[sample.jobID] = space ?? pusher.user
        }
        try await Task.sleep(for: .seconds(2))  // let the last pokes arrive

        let pool = PGPool(url: configuration.databaseURL, size: 1, logger: Logger(label: "bench"))
        let rows = try await pool.execute("""
            SELECT job_id, checkpoint, extract(epoch FROM finished_at)::float8 FROM jobs
            WHERE job_id = ANY(\(Array(jobs.keys))::uuid[]) AND status = \(JobStatus.succeeded)
            """).map { try $0.decode((String, Int64, Double).self) }
        await pool.shutdown()
        let received = reader.stop()
        var latencies: [Double] = []
        var missing = 0
        for (jobID, checkpoint, finished) in rows {
            guard let user = jobs[jobID] else { continue }
            let arrivals = received[PokeReader.Key(user: user, cursor: String(checkpoint))] ?? []
            missing += max(0, expectedPerPush - arrivals.count)
            latencies += arrivals.map { $0 - finished }
        }
        print("jobs succeeded: \(rows.count)/\(pushes); pokes delivered: \(latencies.count)/\(rows.count * expectedPerPush)" + (missing > 0 ? " (\(missing) missing)" : ""))
        print("poke latency (commit → delivered): " + Percentiles(latencies).description)
        for line in Processes.memoryReport(["fanout"]) { print(line) }
        if missing > 0 || rows.count != pushes { throw ExitCode.failure }
    }
}

/// Holds many SSE connections on one thread (poll), recording when each poke arrived.
final class PokeReader: @unchecked Sendable {
    // @unchecked: `arrivals`/`hellos` are guarded by `lock`; the rest belongs to the thread.
    struct Key: Hashable { let user: String; let cursor: String }

    private var fds: [Int32] = []
    private var users: [Int32: String] = [:]
    private var arrivals: [Key: [Double]] = [:]
    private var hellos = 0
    private var running = true
    private let webSocket: Bool
    private let lock = NSLock()

    /// Connections to a loopback host are spread over 127.0.0.1, 127.0.0.2, … one address
    /// per 20,000: a source address has about 28,000 ephemeral ports for one destination.
    init(host: String, port: UInt16, webSocket: Bool, streams: [(user: String, path: String)]) throws {
        self.webSocket = webSocket
        var fds: [Int32] = [], users: [Int32: String] = [:]
        let loopback = host == "localhost" || host == "127.0.0.1"
        for (index, stream) in streams.enumerated() {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            address.sin_addr.s_addr = inet_addr(loopback ? "127.0.0.\(1 + index / 20_000)" : host)
            let result = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard result == 0 else { throw ValidationError("cannot connect to fanout") }
            let request = webSocket
                ? "GET \(stream.path) HTTP/1.1\r\nHost: \(host)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
                : "GET \(stream.path) HTTP/1.1\r\nHost: \(host)\r\nAccept: text/event-stream\r\n\r\n"
            _ = request.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
            fds.append(fd)
            users[fd] = stream.user
        }
        self.fds = fds
        self.users = users
        // One thread per 1,000 sockets: `poll` scans every socket it is given on each wake,
        // and one set of 19,000 made the reader, not fanout, the larger part of a poke's
        // measured latency.
        for shard in stride(from: 0, to: fds.count, by: 1000) {
            let mine = Array(fds[shard..<min(shard + 1000, fds.count)])
            Thread.detachNewThread { [self] in loop(mine) }
        }
    }

    func waitForHellos(within seconds: Double) async throws -> Int {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            let count = lock.withLock { hellos }
            if count == fds.count { return count }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw ValidationError("only \(lock.withLock { hellos }) of \(fds.count) streams said hello")
    }

    func stop() -> [Key: [Double]] {
        lock.withLock { running = false }
        return lock.withLock { arrivals }
    }

    private func loop(_ fds: [Int32]) {
        var pending: [Int32: [UInt8]] = [:]
        var buffer = [UInt8](repeating: 0, count: 65536)
        var pollSet = fds.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        while lock.withLock({ running }) {
            guard poll(&pollSet, nfds_t(pollSet.count), 100) > 0 else { continue }
            let now = Date().timeIntervalSince1970
            for index in pollSet.indices where pollSet[index].revents != 0 {
                let fd = pollSet[index].fd
                let n = recv(fd, &buffer, buffer.count, 0)
                if n <= 0 { pollSet[index].events = 0; continue }
                pending[fd, default: []] += buffer[..<n]
                for json in webSocket ? Self.frames(&pending[fd]!) : Self.events(&pending[fd]!) {
                    guard let object = (try? JSONParser.parse(json))?.objectValue else { continue }
                    switch object["type"]?.stringValue {
                    case "hello": lock.withLock { hellos += 1 }
                    case "poke":
                        if let cursor = object["cursor"]?.stringValue, let user = users[fd] {
                            lock.withLock { arrivals[Key(user: user, cursor: cursor), default: []].append(now) }
                        }
                    default: break
                    }
                }
            }
        }
        for fd in fds { close(fd) }
    }

    /// The messages of the complete events in `pending` (each one `data: {...}` line), which
    /// keeps the rest.
    private static func events(_ pending: inout [UInt8]) -> [String] {
        var text = String(decoding: pending, as: UTF8.self), messages: [String] = []
        while let start = text.range(of: "data: "), let end = text[start.upperBound...].firstIndex(of: "\n") {
            messages.append(String(text[start.upperBound..<end]))
            text = String(text[text.index(after: end)...])
        }
        pending = Array(text.utf8)
        return messages
    }

    /// The text of the complete WebSocket frames in `pending` (after the upgrade's answer,
    /// which is dropped), which keeps the rest. A server's frames are not masked.
    private static func frames(_ pending: inout [UInt8]) -> [String] {
        if pending.starts(with: Array("HTTP/1.1".utf8)) {
            guard let end = (0..<max(0, pending.count - 3)).first(where: { pending[$0..<$0 + 4].elementsEqual([13, 10, 13, 10]) })
            else { return [] }
            pending.removeFirst(end + 4)
        }
        var messages: [String] = [], offset = 0
        while pending.count - offset >= 2 {
            let opcode = pending[offset] & 0x0F
            var length = Int(pending[offset + 1] & 0x7F), header = 2
            if length == 126 {
                guard pending.count - offset >= 4 else { break }
                length = Int(pending[offset + 2]) << 8 | Int(pending[offset + 3])
                header = 4
            }
            guard pending.count - offset >= header + length else { break }
            if opcode == 1 { messages.append(String(decoding: pending[(offset + header)..<(offset + header + length)], as: UTF8.self)) }
            offset += header + length
        }
        pending.removeFirst(offset)
        return messages
    }
}
