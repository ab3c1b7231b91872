import Foundation
import Testing
import TestSupport

/// What a black-box probe sends besides well-formed API calls: broken HTTP framing, HEAD,
/// oversized URLs, a flood of streams, and timing probes of job ids.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct ProtocolEdgeTests {
    /// Sends `bytes` on a new connection and reads until the server closes it (or 5 s pass).
    static func exchange(port: Int, _ bytes: [UInt8]) throws -> (response: String, closed: Bool) {
        guard let fd = Loopback.connect(port: port) else { throw StackError(description: "cannot connect to :\(port)") }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent <= 0 { break }  // the server may refuse before reading everything
            offset += sent
        }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n == 0 { return (String(decoding: received, as: UTF8.self), true) }
            if n < 0 { return (String(decoding: received, as: UTF8.self), errno == ECONNRESET) }
            received += buffer[0..<n]
        }
    }

    /// A request the HTTP parser refuses is answered 400 problem+json (431 when its line and
    /// headers are over the limit), and the connection closed, by the gateway and the fanout.
    @Test func malformedHTTPGets400ProblemAndTheConnectionCloses() async throws {
        try await InProcessStack.with(workers: 1, fanouts: 1) { stack in
            let port = stack.port
            let token = await E2E.token("framing-\(UUID().uuidString.prefix(6))")
            let device = try await stack.client.registerDevice(token)
            let head = "POST /v1/sync/push HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\n"
                + "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            let body = #"{"device_id":"\#(device)","ops":[]}"#
            let hex = String(body.utf8.count, radix: 16)
            let oversized = [
                ("100 KB URL", "GET /v1/public/" + String(repeating: "a", count: 100_000) + " HTTP/1.1\r\nHost: x\r\n\r\n", 431),
                ("90 KB header", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + String(repeating: "b", count: 90_000) + "\r\n\r\n", 431),
            ]
            let cases: [(String, String, Int, Int)] = [
                ("chunk size zz", head + "zz\r\n" + body + "\r\n0\r\n\r\n", 400),
                ("chunk size overflow", head + "FFFFFFFFFFFFFFFFF1\r\n" + body + "\r\n0\r\n\r\n", 400),
                ("bare LF lines", head.replacingOccurrences(of: "\r\n\r\n", with: "\r\n\n") + hex + "\n" + body + "\n0\n\n", 400),
            ].map { ($0.0, $0.1, $0.2, port) } + (oversized + [("a request line that is not HTTP", "GET / HTTQ/9\r\n\r\n", 400)]).flatMap { name, request, status in
                [("gateway: \(name)", request, status, port), ("fanout: \(name)", request, status, stack.fanoutPorts[0])]
            }
            for (name, request, status, port) in cases {
                let (response, closed) = try Self.exchange(port: port, Array(request.utf8))
                let statusLine = response.split(separator: "\r\n").first.map(String.init) ?? ""
                #expect(statusLine.hasPrefix("HTTP/1.1 \(status)"), "\(name): \(statusLine)")
                #expect(response.lowercased().contains("content-type: application/problem+json"), "\(name): \(response)")
                #expect(response.contains(#""code":"invalid_request""#), "\(name): \(response)")
                #expect(!response.contains("500"), "\(name): \(response)")
                #expect(closed, "\(name): the connection stays open")
            }
            // The gateway is unharmed.
            #expect(try await stack.client.request("GET", "/healthz").status == 200)
        }
    }

    /// HEAD is answered wherever GET is, with the same status and header fields and no body;
    /// the stream's other methods are 405 with `Allow`.
    @Test func headIsAnsweredLikeGetWithoutABody() async throws {
        try await InProcessStack.with(workers: 1, fanouts: 1) { stack in
            let api = stack.client
            let token = await E2E.token("head-\(UUID().uuidString.prefix(6))")
            let device = try await api.registerDevice(token)
            for path in ["/healthz", "/v1/public", "/openapi.yaml", "/v1/devices", "/v1/spaces"] {
                let get = try await api.request("GET", path, token: token)
                let head = try await api.request("HEAD", path, token: token)
                #expect(head.status == get.status && head.status == 200, "HEAD \(path): \(head.status)")
                #expect(head.header("Content-Type") == get.header("Content-Type"), "HEAD \(path)")
                #expect(head.body.isEmpty, "HEAD \(path) has a body")
            }
            let missing = try await api.request("HEAD", "/v1/public/no-such-record")
            #expect(missing.status == 404 && missing.body.isEmpty)
            #expect(try await api.request("HEAD", "/v1/devices").status == 401)
            let fanout = APIClient(base: "http://127.0.0.1:\(stack.fanoutPorts[0])")
            #expect(try await fanout.request("HEAD", "/healthz").status == 200)
            let post = try await fanout.request("POST", "/v1/stream")
            #expect(post.status == 405 && post.header("Allow") == "GET, HEAD", "\(post.status) \(post.header("Allow") ?? "-")")
            // Raw, with a deadline: a HEAD that opened a stream would never end.
            let (stream, _) = try Self.exchange(port: stack.fanoutPorts[0], Array("""
                HEAD /v1/stream?device_id=\(device) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\n\
                Accept: text/event-stream\r\nConnection: close\r\n\r\n
                """.utf8))
            let parts = stream.components(separatedBy: "\r\n\r\n")
            #expect(parts.first?.hasPrefix("HTTP/1.1 200") == true, "HEAD /v1/stream: \(stream)")
            #expect(parts.first?.lowercased().contains("content-type: text/event-stream") == true)
            #expect(parts.dropFirst().joined().isEmpty, "HEAD /v1/stream has a body: \(stream)")
        }
    }

    /// A stream asked for on a connection that served another request first (here sent
    /// at once behind it) starts once that answer has ended: the answers do not mix.
    @Test func aStreamAfterAnotherRequestOnItsConnectionStartsAfterThatAnswer() async throws {
        try await InProcessStack.with(workers: 1, fanouts: 1) { stack in
            let token = await E2E.token("after-\(UUID().uuidString.prefix(6))")
            let device = try await stack.client.registerDevice(token)
            let (answers, _) = try Self.exchange(port: stack.fanoutPorts[0], Array("""
                GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n\
                GET /v1/stream?device_id=\(device) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\n\
                Accept: text/event-stream\r\n\r\n
                """.utf8))
            let heads = answers.components(separatedBy: "HTTP/1.1 ").dropFirst()
            #expect(heads.count == 2, "two answers, one after the other: \(answers)")
            #expect(heads.first?.hasPrefix("200") == true && heads.first?.contains("\"status\"") == true, "\(answers)")
            #expect(heads.last?.hasPrefix("200") == true && heads.last?.lowercased().contains("text/event-stream") == true)
            #expect(heads.last?.contains(#""type":"hello""#) == true, "the stream said hello: \(answers)")
        }
    }

    /// A user holds at most STREAMS_PER_USER streams on a fanout; one more is 429 until
    /// one of theirs closes (a closed stream is noticed at its next heartbeat).
    @Test func openStreamsPerUserAreCapped() async throws {
        try await InProcessStack.with(workers: 1, fanouts: 1, environment: ["STREAMS_PER_USER": "3", "STREAM_HEARTBEAT": "1s"]) { stack in
            let token = await E2E.token("streams-\(UUID().uuidString.prefix(6))")
            let device = try await stack.client.registerDevice(token)
            let port = stack.fanoutPorts[0]
            let path = "/v1/stream?device_id=\(device)&access_token=\(token)"
            let streams = try (0..<3).map { _ in try SSEClient(port: port, path: path) }
            defer { streams.forEach { $0.close() } }
            for stream in streams { _ = try await stream.inbox.next("hello", within: 15) }
            // Read as a stream: were it admitted, its body would never end.
            let refused = try SSEClient(port: port, path: path)
            defer { refused.close() }
            let status = try await eventually(within: 10, "an answer to the fourth stream") { refused.httpStatus == 0 ? nil : refused.httpStatus }
            #expect(status == 429, "a fourth stream was answered \(status)")
            // A WebSocket over the cap is refused before its upgrade, with the same problem.
            let upgrade = try FanoutTests.upgrade(port: port, path: "/v1/stream?device_id=\(device)", token: token)
            #expect(upgrade.status == 429 && upgrade.body.contains("rate_limited"), "\(upgrade.status) \(upgrade.body)")
            // Another user is not affected, and a closed stream frees its place.
            let other = await E2E.token("streams-other-\(UUID().uuidString.prefix(6))")
            let otherStream = try SSEClient(port: port, path: "/v1/stream?device_id=\(try await stack.client.registerDevice(other))&access_token=\(other)")
            defer { otherStream.close() }
            _ = try await otherStream.inbox.next("hello", within: 15)
            streams[0].close()
            let again = try await eventually(within: 10, "a place freed") { () -> SSEClient? in
                let stream = try SSEClient(port: port, path: path)
                if (try? await stream.inbox.next("hello", within: 2)) != nil { return stream }
                stream.close()
                return nil
            }
            again.close()
        }
    }

    /// Another user's job and an unknown id answer in the same time: asked one right after
    /// the other, in alternating order, the median of the pairs' differences is within what
    /// the machine's noise makes of it, and at least under a tenth of a millisecond on a
    /// quiet machine (a foreign job's results used to be read and decoded before it was
    /// refused: several times that). Pairs, not the difference of two medians: the
    /// machine's speed drifts over the run, and a pair sees the same speed.
    @Test func anotherUsersJobTakesAsLongAsAnUnknownOne() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let owner = await E2E.token("timing-owner-\(UUID().uuidString.prefix(6))")
            let prober = await E2E.token("timing-prober-\(UUID().uuidString.prefix(6))")
            let device = try await api.registerDevice(owner)
            let ops = (0..<500).map { ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": "n\($0)", "data": ["n": $0]] as [String: Any] }
            let job = try #require(try await api.push(owner, device: device, ops: ops).json["job_id"] as? String)
            _ = try await api.awaitJob(owner, job)
            let unknown = UUID().uuidString.lowercased()
            var foreign: [Double] = [], missing: [Double] = [], differences: [Double] = []
            for round in 0..<330 {
                var pair: [Bool: Double] = [:]
                for (id, isForeign) in (round % 2 == 0 ? [(job, true), (unknown, false)] : [(unknown, false), (job, true)]) {
                    let start = DispatchTime.now().uptimeNanoseconds
                    let answer = try await api.request("GET", "/v1/sync/jobs/\(id)", token: prober)
                    pair[isForeign] = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6
                    #expect(answer.status == 404)
                }
                // The first rounds warm connections and caches.
                guard round >= 30, let foreignTime = pair[true], let missingTime = pair[false] else { continue }
                foreign.append(foreignTime)
                missing.append(missingTime)
                differences.append(foreignTime - missingTime)
            }
            func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
            let difference = median(differences)
            // What the machine's noise alone could make of that median: four of its standard
            // errors (from the differences' median absolute deviation), and never less than
            // a tenth of a millisecond.
            let deviation = 1.4826 * median(differences.map { abs($0 - difference) })
            let bound = max(0.1, 4 * 1.2533 * deviation / Double(differences.count).squareRoot())
            print(String(
                format: "job lookup medians: foreign %.3f ms, unknown %.3f ms, of the pairs' differences %.3f ms (bound %.3f ms)",
                median(foreign), median(missing), difference, bound))
            #expect(abs(difference) < bound, "a foreign job answers \(difference) ms slower than an unknown one")
        }
    }
}
