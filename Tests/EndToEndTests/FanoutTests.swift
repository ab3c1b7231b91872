import Foundation
import Testing
import TestSupport

/// Fanout streams with real processes: gateway, worker, fanout replicas.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct FanoutTests {
    struct Device {
        let user: String
        let token: String
        let id: String
    }

    static func devices(_ api: APIClient, user: String, count: Int) async throws -> [Device] {
        let token = await E2E.token(user)
        var devices: [Device] = []
        for i in 0..<count { devices.append(Device(user: user, token: token, id: try await api.registerDevice(token, name: "d\(i)"))) }
        return devices
    }

    static func path(_ device: Device) -> String { "/v1/stream?device_id=\(device.id)&access_token=\(device.token)" }

    static func upsert(_ api: APIClient, _ device: Device, id: String = "r-\(UUID().uuidString.prefix(6))") async throws -> (job: String, accepted: Date) {
        let result = try await api.push(device.token, device: device.id, ops: [
            ["op_id": newOpID(), "type": "upsert", "collection": "todos", "id": id, "data": ["title": "x"]],
        ])
        return (try #require(result.json["job_id"] as? String), Date())
    }

    /// A stream ends when the token it was opened with stops being accepted — at its `exp`
    /// and the 60 s of leeway (the client opens it again with a fresh one); a stream opened
    /// with a longer-lived token goes on.
    @Test func aStreamEndsWhenItsTokenExpires() async throws {
        try await InProcessStack.with(workers: 0, fanouts: 1) { stack in
            let user = "expiring-\(UUID().uuidString.prefix(6))"
            let token = await E2E.token(user)
            let device = try await stack.client.registerDevice(token)
            let shortLived = await Tokens.make(user, seconds: 3 - 60)  // accepted for 3 s more
            let port = stack.fanoutPorts[0]
            let short = try SSEClient(port: port, path: "/v1/stream?device_id=\(device)&access_token=\(shortLived)")
            let long = try SSEClient(port: port, path: "/v1/stream?device_id=\(device)&access_token=\(token)")
            defer { short.close(); long.close() }
            _ = try await short.inbox.next("hello")
            _ = try await long.inbox.next("hello")
            let opened = Date()
            _ = try await eventually(within: 8, "the stream's end at its token's expiry") { short.inbox.finished ? true : nil }
            #expect(Date().timeIntervalSince(opened) < 5, "ended \(Date().timeIntervalSince(opened)) s after it opened")
            #expect(!long.inbox.finished, "the stream with a valid token was ended too")
        }
    }

    /// Device B (SSE) and C (WebSocket) get a poke with the checkpoint within a second of
    /// A's job committing; A gets its job's outcome instead (so it need not ask for it),
    /// marked troubled when an op was rejected. Each stream starts with hello and the
    /// current cursor.
    @Test func otherDevicesArePokedWithinASecondTheOriginIsNot() async throws {
        try await Stack.with(workers: 1, fanouts: 1) { stack in
            let api = stack.client
            let port = stack.fanouts[0].port
            let devices = try await Self.devices(api, user: "fan-\(UUID().uuidString.prefix(6))", count: 3)
            let (a, b, c) = (devices[0], devices[1], devices[2])
            let origin = try SSEClient(port: port, path: Self.path(a))
            let other = try SSEClient(port: port, path: Self.path(b))
            let socket = WSClient(port: port, path: Self.path(c))
            defer { origin.close(); other.close() }
            for inbox in [origin.inbox, other.inbox, socket.inbox] {
                #expect(try await inbox.next("hello").message["cursor"] as? String == "0")
            }
            let (jobID, _) = try await Self.upsert(api, a)
            let job = try await api.awaitJob(a.token, jobID)
            let committed = Date()
            let checkpoint = try #require(job["checkpoint"] as? String)
            for inbox in [other.inbox, socket.inbox] {
                let poke = try await inbox.next("poke", within: 2)
                #expect(poke.message["cursor"] as? String == checkpoint)
                #expect(poke.at.timeIntervalSince(committed) < 1.0)
            }
            let outcome = try await origin.inbox.next("job", within: 2)
            #expect(outcome.message["job_id"] as? String == jobID && outcome.message["status"] as? String == "succeeded")
            #expect(outcome.message["checkpoint"] as? String == checkpoint && outcome.message["troubled"] as? Bool == false)
            try await Task.sleep(for: .milliseconds(300))
            #expect(origin.inbox.of(type: "poke").isEmpty, "the origin device is never poked")

            // A job with a rejected op: the origin hears about it, the others get a poke.
            let skewed = try await api.push(a.token, device: a.id, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "todos", "id": "late", "data": ["t": 1],
                 "hlc": "\(Int64(Date().timeIntervalSince1970 * 1000) + 3_600_000)-00000-\(a.id)"],
                ["op_id": newOpID(), "type": "upsert", "collection": "todos", "id": "ok", "data": ["t": 1]],
            ])
            let skewedJob = try #require(skewed.json["job_id"] as? String)
            let notice = try await origin.inbox.next("job", after: 1, within: 5)
            #expect(notice.message["job_id"] as? String == skewedJob)
            #expect(notice.message["status"] as? String == "succeeded" && notice.message["troubled"] as? Bool == true)
            // A new stream's hello carries the current cursor.
            let late = try SSEClient(port: port, path: Self.path(b))
            defer { late.close() }
            #expect(try await late.inbox.next("hello").message["cursor"] as? String == notice.message["checkpoint"] as? String)
            await socket.close()
            // SIGTERM with streams open: they end, and the process exits 0 promptly.
            #expect(stack.fanouts[0].stop(within: 5) == 0)
            _ = try await eventually(within: 2, "the streams ended") { other.inbox.finished ? true : nil }
        }
    }

    /// With two fanout replicas and the user's devices spread over both, every device
    /// other than the origin is poked; the admin API lists each replica's queue.
    @Test func everyDeviceIsPokedWhicheverReplicaItIsOn() async throws {
        try await InProcessStack.with(workers: 1, fanouts: 2) { stack in
            let api = stack.client
            let devices = try await Self.devices(api, user: "spread-\(UUID().uuidString.prefix(6))", count: 5)
            let clients = try devices.enumerated().map { index, device in
                try SSEClient(port: stack.fanoutPorts[index % 2], path: Self.path(device))
            }
            defer { clients.forEach { $0.close() } }
            for client in clients { _ = try await client.inbox.next("hello") }
            _ = try await api.awaitJob(devices[0].token, try await Self.upsert(api, devices[0]).job)
            for client in clients.dropFirst() { _ = try await client.inbox.next("poke", within: 2) }
            #expect(clients[0].inbox.of(type: "poke").isEmpty)
            let admin = await E2E.token("ops-\(UUID().uuidString.prefix(6))", admin: true)
            let queues = try await api.request("GET", "/v1/admin/queues", token: admin).json["items"] as? [[String: Any]] ?? []
            let replicas = queues.compactMap { $0["name"] as? String }.filter { $0.hasPrefix("fanout.") }
            #expect(replicas.count >= 2, "each replica's queue is listed: \(replicas)")
        }
    }

    /// A killed fanout, restarted on the same port: clients reconnect and are poked again;
    /// an idle stream gets heartbeats (every STREAM_HEARTBEAT).
    @Test func aRestartedFanoutResumesDelivering() async throws {
        try await Stack.with(workers: 1, fanouts: 1, environment: ["STREAM_HEARTBEAT": "300ms"]) { stack in
            let api = stack.client
            let devices = try await Self.devices(api, user: "restart-\(UUID().uuidString.prefix(6))", count: 2)
            let port = stack.fanouts[0].port
            stack.fanouts[0].signal(SIGKILL)
            stack.fanouts[0].stop(within: 1)
            try await stack.addFanout(port: port)
            let client = try SSEClient(port: port, path: Self.path(devices[1]))
            defer { client.close() }
            _ = try await client.inbox.next("hello")
            _ = try await api.awaitJob(devices[0].token, try await Self.upsert(api, devices[0]).job)
            _ = try await client.inbox.next("poke", within: 2)
            _ = try await client.inbox.next("heartbeat", within: 2)
        }
    }

    /// A device that drops its stream and reconnects at once (a page reload), five times,
    /// keeps getting pokes on the new stream.
    @Test func aQuickReconnectKeepsPokesFlowing() async throws {
        try await InProcessStack.with(workers: 1, fanouts: 1) { stack in
            let api = stack.client
            let devices = try await Self.devices(api, user: "reload-\(UUID().uuidString.prefix(6))", count: 2)
            for _ in 0..<5 {
                let old = try SSEClient(port: stack.fanoutPorts[0], path: Self.path(devices[1]))
                _ = try await old.inbox.next("hello")
                old.close()
                let fresh = try SSEClient(port: stack.fanoutPorts[0], path: Self.path(devices[1]))
                defer { fresh.close() }
                _ = try await fresh.inbox.next("hello")
                _ = try await api.awaitJob(devices[0].token, try await Self.upsert(api, devices[0]).job)
                _ = try await fresh.inbox.next("poke", within: 2)
            }
        }
    }

    /// The origin device learns that its job was dead-lettered, without polling.
    @Test func theOriginHearsWhenItsJobDies() async throws {
        let failing = try await FailureTests.FailingCollection("stream_poison")
        var removed = false
        defer { if !removed { Task { try? await failing.remove() } } }
        try await InProcessStack.with(workers: 1, fanouts: 1) { stack in
            let api = stack.client
            let devices = try await Self.devices(api, user: "dies-\(UUID().uuidString.prefix(6))", count: 2)
            let origin = try SSEClient(port: stack.fanoutPorts[0], path: Self.path(devices[0]))
            let other = try SSEClient(port: stack.fanoutPorts[0], path: Self.path(devices[1]))
            defer { origin.close(); other.close() }
            _ = try await origin.inbox.next("hello")
            _ = try await other.inbox.next("hello")
            let push = try await api.push(devices[0].token, device: devices[0].id, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "stream_poison", "id": "x", "data": ["t": 1]],
            ])
            let jobID = try #require(push.json["job_id"] as? String)
            let notice = try await origin.inbox.next("job", within: 15)
            #expect(notice.message["job_id"] as? String == jobID)
            #expect(notice.message["status"] as? String == "dead" && notice.message["troubled"] as? Bool == true)
            #expect(other.inbox.of(type: "poke").isEmpty, "nothing changed: no poke")
            try await failing.remove()
            removed = true
        }
    }

    /// Refusals are problem+json: no token 401, unknown or foreign device 404, revoked 403.
    @Test func refusals() async throws {
        try await InProcessStack.with(workers: 0, fanouts: 1) { stack in
            let fanout = APIClient(base: "http://127.0.0.1:\(stack.fanoutPorts[0])")
            let api = stack.client
            let mine = try await Self.devices(api, user: "refuse-\(UUID().uuidString.prefix(6))", count: 2)
            #expect(try await api.request("DELETE", "/v1/devices/\(mine[1].id)", token: mine[0].token).status == 204)
            let sse = ["Accept": "text/event-stream"]
            let noToken = try await fanout.request("GET", "/v1/stream?device_id=\(mine[0].id)", headers: sse)
            #expect(noToken.status == 401 && noToken.json["code"] as? String == "unauthorized")
            let foreign = try await fanout.request("GET", "/v1/stream?device_id=\(mine[0].id)", token: await E2E.token("someone-else"), headers: sse)
            #expect(foreign.status == 404 && foreign.header("Content-Type") == "application/problem+json")
            #expect(try await fanout.request("GET", "/v1/stream?device_id=\(UUID())", token: mine[0].token, headers: sse).status == 404)
            let revoked = try await fanout.request("GET", "/v1/stream?device_id=\(mine[1].id)", token: mine[0].token, headers: sse)
            #expect(revoked.status == 403 && revoked.json["code"] as? String == "forbidden")

            // The same refusals over a WebSocket upgrade: the same problem+json, not a bare 400.
            let port = stack.fanoutPorts[0]
            for (token, device, status, code) in [
                (nil, mine[0].id, 401, "unauthorized"), ("not-a-token", mine[0].id, 401, "unauthorized"),
                (await E2E.token("someone-else"), mine[0].id, 404, "not_found"), (mine[0].token, UUID().uuidString, 404, "not_found"),
                (mine[0].token, mine[1].id, 403, "forbidden"),
            ] {
                let answer = try Self.upgrade(port: port, path: "/v1/stream?device_id=\(device)", token: token)
                #expect(answer.status == status, "\(answer.status) \(answer.body)")
                #expect(answer.headers["content-type"] == "application/problem+json", "\(answer.headers)")
                #expect(answer.body.contains("\"code\":\"\(code)\""), "\(answer.body)")
            }
            // An accepted upgrade still upgrades.
            #expect(try Self.upgrade(port: port, path: "/v1/stream?device_id=\(mine[0].id)", token: mine[0].token).status == 101)
        }
    }

    /// Sends a WebSocket upgrade request by hand and reads the answer's status, headers and body.
    static func upgrade(port: Int, path: String, token: String?) throws -> (status: Int, headers: [String: String], body: String) {
        guard let fd = Loopback.connect(port: port) else { throw StackError(description: "cannot connect to :\(port)") }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
            + "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            + (token.map { "Authorization: Bearer \($0)\r\n" } ?? "") + "\r\n"
        _ = request.withCString { send(fd, $0, strlen($0), 0) }
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        func headEnd() -> Int? {
            data.indices.dropLast(3).first { data[$0] == 13 && data[$0 + 1] == 10 && data[$0 + 2] == 13 && data[$0 + 3] == 10 }
        }
        while headEnd() == nil {
            let n = recv(fd, &buffer, buffer.count, 0)
            guard n > 0 else { throw StackError(description: "the connection closed before an answer") }
            data += buffer[..<n]
        }
        let end = headEnd()!
        let lines = String(decoding: data[..<end], as: UTF8.self).split(separator: "\r\n")
        let status = Int(lines.first?.split(separator: " ").dropFirst().first ?? "") ?? 0
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            let pair = line.split(separator: ":", maxSplits: 1)
            if pair.count == 2 { headers[pair[0].lowercased()] = pair[1].trimmingCharacters(in: .whitespaces) }
        }
        let length = Int(headers["content-length"] ?? "0") ?? 0
        while data.count < end + 4 + length {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n <= 0 { break }
            data += buffer[..<n]
        }
        return (status, headers, String(decoding: data[(end + 4)...], as: UTF8.self))
    }
}
