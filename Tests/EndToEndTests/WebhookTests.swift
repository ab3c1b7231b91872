import Auth
import Foundation
import NIOConcurrencyHelpers
import Testing
import TestSupport

/// A tiny HTTP server for webhook and hook tests: records each request and answers with the
/// status (and body) `reply` picks for it (after `delay` seconds), one connection per request.
final class WebhookReceiver: @unchecked Sendable {
    // @unchecked: `listener` is set once; requests sit behind a lock.
    struct Received: Sendable {
        let at: Date
        let headers: [String: String]
        let body: [UInt8]
    }

    let port: Int
    private let listener: Int32
    private let received = NIOLockedValueBox<[Received]>([])

    /// What a request is answered with: its status, after how long, and the body.
    typealias Reply = @Sendable (_ index: Int, _ body: [UInt8]) -> (status: Int, delay: Double, body: [UInt8])

    /// `headers` adds response header lines (e.g. a redirect's `Location`); with
    /// `trickledBody`, the answer's body has that many bytes, sent one every two seconds.
    convenience init(headers: String = "", trickledBody: Int = 0, respond: @escaping @Sendable (Int) -> (status: Int, delay: Double)) throws {
        try self.init(headers: headers, trickledBody: trickledBody) { index, _ in
            let answer = respond(index)
            return (answer.status, answer.delay, [])
        }
    }

    init(headers: String = "", trickledBody: Int = 0, reply: @escaping Reply) throws {
        listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        var yes: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let listener = self.listener
        withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                _ = bind(listener, pointer, length)
                _ = getsockname(listener, pointer, &length)
            }
        }
        port = Int(UInt16(bigEndian: address.sin_port))
        guard listen(listener, 64) == 0 else { throw StackError(description: "listen failed") }
        let received = self.received, respond = reply
        Thread.detachNewThread {
            while true {
                let connection = Loopback.accept(listener)
                if connection < 0 { return }
                let index = received.withLockedValue { $0.count }
                Thread.detachNewThread {
                    Self.serve(connection, index: index, received: received, headers: headers, trickledBody: trickledBody, respond: respond)
                }
                // Let the serving thread record before the next accept picks an index.
                usleep(1000)
            }
        }
    }

    private static func serve(
        _ fd: Int32, index: Int, received: NIOLockedValueBox<[Received]>, headers extra: String, trickledBody: Int,
        respond: Reply
    ) {
        defer { Glibc.close(fd) }
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        var headerEnd: Int?
        var contentLength = 0
        while true {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n <= 0 { return }
            data += buffer[..<n]
            if headerEnd == nil, let end = data.indices.dropLast(3).first(where: { data[$0] == 13 && data[$0 + 1] == 10 && data[$0 + 2] == 13 && data[$0 + 3] == 10 }) {
                headerEnd = end + 4
                let head = String(decoding: data[..<end], as: UTF8.self)
                for line in head.split(separator: "\r\n").dropFirst() where line.lowercased().hasPrefix("content-length:") {
                    contentLength = Int(line.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) ?? 0
                }
            }
            if let headerEnd, data.count >= headerEnd + contentLength { break }
        }
        let end = headerEnd!
        var headers: [String: String] = [:]
        for line in String(decoding: data[..<end], as: UTF8.self).split(separator: "\r\n").dropFirst() {
            let pair = line.split(separator: ":", maxSplits: 1)
            if pair.count == 2 { headers[pair[0].lowercased()] = pair[1].trimmingCharacters(in: .whitespaces) }
        }
        let body = Array(data[end..<(end + contentLength)])
        let answer = respond(index, body)
        if answer.delay > 0 { usleep(UInt32(answer.delay * 1_000_000)) }
        received.withLockedValue { $0.append(Received(at: Date(), headers: headers, body: body)) }
        let length = trickledBody > 0 ? trickledBody : answer.body.count
        let response = "HTTP/1.1 \(answer.status) X\r\n\(extra)Content-Length: \(length)\r\nConnection: close\r\n\r\n"
        _ = response.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
        if !answer.body.isEmpty { _ = answer.body.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } }
        for _ in 0..<trickledBody {
            sleep(2)
            var byte = UInt8(ascii: "x")
            guard send(fd, &byte, 1, Int32(MSG_NOSIGNAL)) == 1 else { return }
        }
    }

    var requests: [Received] { received.withLockedValue { $0 } }

    func close() {
        shutdown(listener, Int32(SHUT_RDWR))
        Glibc.close(listener)
    }
}

/// Signed webhooks with retries and dead letters, real processes throughout.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct WebhookTests {
    static let allowLoopback = ["ALLOW_PRIVATE_WEBHOOKS": "true"]

    static func register(_ api: APIClient, token: String, pushURL: String? = nil) async throws -> (id: String, secret: String?) {
        var body: [String: Any] = ["name": "phone", "platform": "ios"]
        if let pushURL { body["push_url"] = pushURL }
        let result = try await api.json("POST", "/v1/devices", token: token, body)
        guard result.status == 201, let id = result.json["device_id"] as? String else {
            throw StackError(description: "registration answered \(result.status): \(result.text)")
        }
        return (id, result.json["push_secret"] as? String)
    }

    /// The receiver answers 500 twice, then 200: three signed POSTs, spaced by the tiers.
    @Test func signedPokesAreRetriedByTier() async throws {
        let receiver = try WebhookReceiver { index in (index < 2 ? 500 : 200, 0) }
        defer { receiver.close() }
        try await InProcessStack.with(workers: 1, fanouts: 1, environment: Self.allowLoopback) { stack in
            let api = stack.client
            let user = "hook-\(UUID().uuidString.prefix(6))"
            let token = await E2E.token(user)
            let origin = try await Self.register(api, token: token)
            let phone = try await Self.register(api, token: token, pushURL: "http://127.0.0.1:\(receiver.port)/hook")
            let push = try await api.push(token, device: origin.id, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "lists", "id": "l1", "data": ["t": "eggs"]],
            ])
            let job = try await api.awaitJob(token, try #require(push.json["job_id"] as? String))
            let requests = try await eventually(within: 10, "three webhook requests") {
                receiver.requests.count >= 3 ? receiver.requests : nil
            }
            #expect(requests.count == 3)
            for request in requests {
                let signature = try #require(request.headers["syncline-signature"])
                #expect(WebhookSignature.isValid(signature, secret: try #require(phone.secret), body: request.body))
                #expect(!WebhookSignature.isValid(signature, secret: "not-the-secret", body: request.body))
                let body = try #require(try JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any])
                #expect(body["type"] as? String == "poke")
                #expect(body["user_id"] as? String == user)
                #expect(body["device_id"] as? String == phone.id)
                #expect(body["cursor"] as? String == job["checkpoint"] as? String)
                #expect(body["space_id"] as? String == job["space_id"] as? String && body["space_id"] != nil, "names the space")
            }
            for (index, tier) in E2E.retryDelays.prefix(2).enumerated() {
                let gap = requests[index + 1].at.timeIntervalSince(requests[index].at)
                #expect(gap >= tier - 0.05 && gap < tier + 1.5, "retry \(index + 1) after \(gap) s; tier \(tier) s")
            }
        }
    }

    /// A receiver that redirects: the redirect is a failed delivery, retried by tier, and
    /// the address it points to never gets the delivery.
    @Test func redirectsAreFailuresNeverFollowed() async throws {
        let target = try WebhookReceiver { _ in (200, 0) }
        defer { target.close() }
        let bouncer = try WebhookReceiver(headers: "Location: http://127.0.0.1:\(target.port)/internal\r\n") { _ in (307, 0) }
        defer { bouncer.close() }
        try await InProcessStack.with(workers: 1, fanouts: 1, environment: Self.allowLoopback) { stack in
            let api = stack.client
            let token = await E2E.token("bounce-\(UUID().uuidString.prefix(6))")
            let origin = try await Self.register(api, token: token)
            _ = try await Self.register(api, token: token, pushURL: "http://127.0.0.1:\(bouncer.port)/hook")
            let push = try await api.push(token, device: origin.id, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "lists", "id": "l1", "data": ["t": "eggs"]],
            ])
            _ = try await api.awaitJob(token, try #require(push.json["job_id"] as? String))
            _ = try await eventually(within: 10, "the redirect retried") { bouncer.requests.count >= 2 ? true : nil }
            #expect(target.requests.isEmpty, "a redirect must not be followed")
        }
    }

    /// Always 500: dead-lettered after MAX_ATTEMPTS, listed by the admin API with
    /// `queue=notify`; replayed once the receiver is healthy, it is delivered.
    @Test func failingWebhooksAreDeadLetteredAndReplayable() async throws {
        let healthy = NIOLockedValueBox(false)
        let receiver = try WebhookReceiver { _ in (healthy.withLockedValue { $0 } ? 200 : 500, 0) }
        defer { receiver.close() }
        try await InProcessStack.with(workers: 1, fanouts: 1, environment: Self.allowLoopback) { stack in
            let api = stack.client
            let admin = await E2E.token("hook-admin", admin: true)
            let user = "deadhook-\(UUID().uuidString.prefix(6))"
            let token = await E2E.token(user)
            let origin = try await Self.register(api, token: token)
            _ = try await Self.register(api, token: token, pushURL: "http://127.0.0.1:\(receiver.port)/hook")
            _ = try await api.push(token, device: origin.id, ops: [
                ["op_id": newOpID(), "type": "delete", "collection": "lists", "id": "l1"],
            ])
            let item = try await eventually(within: 15, "the webhook dead-lettered") { () -> [String: Any]? in
                let page = try await api.request("GET", "/v1/admin/dead-letters?queue=notify&user_id=\(user)", token: admin).json
                return (page["items"] as? [[String: Any]])?.first
            }
            #expect(item["reason"] as? String == "max_attempts")
            #expect(item["attempts"] as? Int == E2E.maxAttempts)
            #expect(item["queue"] as? String == "notify")
            #expect(receiver.requests.count == E2E.maxAttempts)

            healthy.withLockedValue { $0 = true }
            let id = try #require(item["job_id"] as? String)
            #expect(try await api.request("POST", "/v1/admin/dead-letters/\(id)/replay", token: admin).status == 202)
            _ = try await eventually(within: 10, "the replayed webhook delivered") {
                receiver.requests.count == E2E.maxAttempts + 1 ? true : nil
            }
            let after = try await api.request("GET", "/v1/admin/dead-letters?queue=notify&user_id=\(user)", token: admin).json
            #expect((after["items"] as? [Any])?.isEmpty == true)
        }
    }

    /// A receiver that hangs does not hold up another device's delivery.
    @Test func aSlowReceiverDoesNotDelayOthers() async throws {
        let slow = try WebhookReceiver { _ in (200, 4) }
        let fast = try WebhookReceiver { _ in (200, 0) }
        defer { slow.close(); fast.close() }
        try await InProcessStack.with(workers: 1, fanouts: 1, environment: Self.allowLoopback) { stack in
            let api = stack.client
            let token = await E2E.token("slowhook-\(UUID().uuidString.prefix(6))")
            let origin = try await Self.register(api, token: token)
            for receiver in [slow, fast, slow] {
                _ = try await Self.register(api, token: token, pushURL: "http://127.0.0.1:\(receiver.port)/hook")
            }
            let push = try await api.push(token, device: origin.id, ops: [
                ["op_id": newOpID(), "type": "delete", "collection": "lists", "id": "x"],
            ])
            _ = try await api.awaitJob(token, try #require(push.json["job_id"] as? String))
            let committed = Date()
            let first = try await eventually(within: 3, "the fast receiver's poke") { fast.requests.first }
            #expect(first.at.timeIntervalSince(committed) < 1.5)
            #expect(slow.requests.isEmpty, "the slow receivers are still answering")
        }
    }

    /// 70 receivers of one user that answer at once and then send their body a byte every
    /// two seconds hold a few of the fanout's places, their owner's: another user's poke
    /// is delivered in its usual time, and the slow ones are cut off at the deadline.
    @Test func oneUsersSlowReceiversDoNotDelayAnotherUsersPokes() async throws {
        let slow = try WebhookReceiver(trickledBody: 30) { _ in (200, 0) }
        let fast = try WebhookReceiver { _ in (200, 0) }
        defer { slow.close(); fast.close() }
        try await InProcessStack.with(workers: 1, fanouts: 1, environment: Self.allowLoopback.merging(["WEBHOOK_TIMEOUT": "3s"]) { $1 }) { stack in
            let api = stack.client
            let slowOwner = await E2E.token("slowhooks-\(UUID().uuidString.prefix(6))")
            let slowOrigin = try await Self.register(api, token: slowOwner)
            for _ in 0..<70 {
                _ = try await Self.register(api, token: slowOwner, pushURL: "http://127.0.0.1:\(slow.port)/hook")
            }
            let other = await E2E.token("prompt-\(UUID().uuidString.prefix(6))")
            let otherOrigin = try await Self.register(api, token: other)
            _ = try await Self.register(api, token: other, pushURL: "http://127.0.0.1:\(fast.port)/hook")

            let flood = try await api.push(slowOwner, device: slowOrigin.id, ops: [
                ["op_id": newOpID(), "type": "delete", "collection": "lists", "id": "x"],
            ])
            _ = try await api.awaitJob(slowOwner, try #require(flood.json["job_id"] as? String))
            _ = try await eventually(within: 10, "the slow receivers called") { slow.requests.count >= 4 ? true : nil }
            let push = try await api.push(other, device: otherOrigin.id, ops: [
                ["op_id": newOpID(), "type": "delete", "collection": "lists", "id": "y"],
            ])
            _ = try await api.awaitJob(other, try #require(push.json["job_id"] as? String))
            let committed = Date()
            let first = try await eventually(within: 10, "the other user's poke") { fast.requests.first }
            let delay = first.at.timeIntervalSince(committed)
            print(String(format: "webhooks beside 70 slow receivers of another user: delivered %.3f s after its job finished", delay))
            #expect(delay < 1.5, "delivered \(delay) s after its commit")
        }
    }

    /// Without ALLOW_PRIVATE_WEBHOOKS, private and loopback push URLs are refused.
    @Test func privateAddressesAreRefused() async throws {
        try await InProcessStack.with(workers: 0) { stack in
            let token = await E2E.token("private-\(UUID().uuidString.prefix(6))")
            for url in ["http://127.0.0.1:9/x", "http://10.1.2.3/x", "http://localhost/x", "http://[::1]/x", "http://192.168.0.10/x"] {
                let result = try await stack.client.json("POST", "/v1/devices", token: token, ["name": "p", "platform": "ios", "push_url": url])
                #expect(result.status == 422, "\(url): \(result.status)")
            }
            let public_ = try await stack.client.json("POST", "/v1/devices", token: token, ["name": "p", "platform": "ios", "push_url": "https://hooks.example.com/x"])
            #expect(public_.status == 201)
        }
    }
}
