import Foundation
import PQBridge
import Testing
import TestSupport

/// Limits, timeouts and the defects a black-box probe found, each against the real services.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct HardeningTests {
    func op(_ id: String, _ data: [String: Any] = ["t": 1]) -> [String: Any] {
        ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": id, "data": data]
    }

    @Test func aPushBurstOverTheLimitGets429AndRetriesAreAppliedOnce() async throws {
        // 1/s after a burst of 5: however slow this machine pushes, most of 15 are refused.
        try await Stack.with(workers: 1, environment: ["RATE_LIMIT_PUSH": "1/s,burst=5"]) { stack in
            let api = stack.client
            let token = await E2E.token("burst-\(UUID().uuidString.prefix(6))")
            let device = try await api.registerDevice(token)
            let ops = (0..<15).map { op("n\($0)") }
            var refused: [Int] = []
            var jobs: [String] = []
            for (index, one) in ops.enumerated() {
                let answer = try await api.push(token, device: device, ops: [one])
                if answer.status == 429 {
                    #expect(answer.json["code"] as? String == "rate_limited")
                    #expect(Int(answer.header("Retry-After") ?? "") ?? 0 >= 1)
                    refused.append(index)
                } else {
                    #expect(answer.status == 202)
                    jobs.append(try #require(answer.json["job_id"] as? String))
                }
            }
            #expect(refused.count >= 5, "expected most of a 15-push burst over 1/s,burst=5 to be refused: \(refused.count)")
            // Another user is unaffected.
            let other = await E2E.token("calm-\(UUID().uuidString.prefix(6))")
            let otherDevice = try await api.registerDevice(other)
            #expect(try await api.push(other, device: otherDevice, ops: [op("x")]).status == 202)
            // Every refused push, retried after Retry-After, is accepted.
            for index in refused {
                while true {
                    let answer = try await api.push(token, device: device, ops: [ops[index]])
                    if answer.status == 202 {
                        jobs.append(try #require(answer.json["job_id"] as? String))
                        break
                    }
                    #expect(answer.status == 429)
                    try await Task.sleep(for: .seconds(Double(answer.header("Retry-After") ?? "1") ?? 1))
                }
            }
            for job in jobs { #expect(try await api.awaitJob(token, job)["status"] as? String == "succeeded") }
            let (changes, cursor) = try await api.pullAll(token)
            #expect(changes.count == 15 && cursor == "15", "each op applied once: \(changes.count) changes, cursor \(cursor)")
            let metrics = try await api.request("GET", "/metrics")
            #expect(metrics.text.contains("syncline_rate_limited_total"))
        }
    }

    @Test func newStreamsOverTheLimitGet429() async throws {
        try await Stack.with(workers: 1, fanouts: 1, environment: ["RATE_LIMIT_STREAMS": "1/m,burst=2"]) { stack in
            let token = await E2E.token("streamer-\(UUID().uuidString.prefix(6))")
            let device = try await stack.client.registerDevice(token)
            let fanout = APIClient(base: "http://127.0.0.1:\(stack.fanouts[0].port)")
            let streams = try (0..<2).map { _ in
                try SSEClient(port: stack.fanouts[0].port, path: "/v1/stream?device_id=\(device)&access_token=\(token)")
            }
            defer { streams.forEach { $0.close() } }
            for (index, stream) in streams.enumerated() {
                // A generous wait: a loaded CI machine once took over 5 s to say hello here.
                do {
                    _ = try await stream.inbox.next("hello", within: 15)
                } catch {
                    throw StackError(description: """
                        stream \(index): HTTP \(stream.httpStatus), no hello (\(error)); \
                        fanout said: \(stack.fanouts[0].logTail())
                        """)
                }
            }
            let third = try await fanout.request(
                "GET", "/v1/stream?device_id=\(device)", token: token, headers: ["Accept": "text/event-stream"])
            #expect(third.status == 429 && third.json["code"] as? String == "rate_limited", "\(third.status) \(third.text)")
            #expect(Int(third.header("Retry-After") ?? "") ?? 0 >= 1)
        }
    }

    /// Opens a connection, sends `bytes`, and returns how long the server took to close it.
    func secondsUntilClosed(port: Int, sending bytes: String, giveUpAfter: Double = 10) -> Double? {
        guard let fd = Loopback.connect(port: port) else { return nil }
        defer { close(fd) }
        var timeout = timeval(tv_sec: Int(giveUpAfter), tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let start = Date()
        _ = bytes.withCString { send(fd, $0, strlen($0), 0) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n == 0 { return Date().timeIntervalSince(start) }
            if n < 0 { return errno == ECONNRESET ? Date().timeIntervalSince(start) : nil }
        }
    }

    @Test func connectionsThatStallAreClosedWithinTheTimeout() async throws {
        try await InProcessStack.with(workers: 1, fanouts: 1, environment: ["HTTP_IDLE_TIMEOUT": "1s"]) { stack in
            for port in [stack.port, stack.fanoutPorts[0]] {
                let midHeaders = secondsUntilClosed(port: port, sending: "GET /v1/devices HTTP/1.1\r\nHost: x\r\nAuthor")
                #expect(midHeaders.map { $0 < 4 } == true, "mid-headers on :\(port): \(String(describing: midHeaders))")
                let midBody = secondsUntilClosed(
                    port: port, sending: "POST /v1/sync/push HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"device_id\"")
                #expect(midBody.map { $0 < 4 } == true, "mid-body on :\(port): \(String(describing: midBody))")
                let idle = secondsUntilClosed(port: port, sending: "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                #expect(idle.map { $0 < 4 } == true, "idle keep-alive on :\(port): \(String(describing: idle))")
            }
        }
    }

    /// Large records: a page ends at the 4 MiB byte budget with `has_more`, the gateway's
    /// memory stays bounded, and paging returns every record with its data intact.
    @Test func aPullOfLargeRecordsComesInPagesOfBoundedSize() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let token = await E2E.token("big-\(UUID().uuidString.prefix(6))")
            let device = try await api.registerDevice(token)
            // Random text, which PostgreSQL cannot compress: about 200 KiB stored per record.
            let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
            var texts: [String: String] = [:]
            for batch in 0..<8 {
                var ops: [[String: Any]] = []
                for n in 0..<4 {
                    let id = "big\(batch * 4 + n)"
                    let text = String((0..<200_000).map { _ in alphabet.randomElement()! })
                    texts[id] = text
                    ops.append(["op_id": newOpID(), "type": "upsert", "collection": "files", "id": id, "data": ["body": text, "é": "ü\n\"q\""]])
                }
                let pushed = try await api.push(token, device: device, ops: ops)
                #expect(pushed.status == 202, "\(pushed.text.prefix(200))")
                _ = try await api.awaitJob(token, try #require(pushed.json["job_id"] as? String))
            }
            var cursor: String?, pages: [Int] = [], seen: [String: String] = [:]
            while true {
                let page = try await api.request("GET", "/v1/sync/pull?limit=1000" + (cursor.map { "&since=\($0)" } ?? ""), token: token)
                #expect(page.status == 200)
                #expect(page.body.count < 6 << 20, "a page stays near the budget: \(page.body.count) bytes")
                let changes = page.json["changes"] as? [[String: Any]] ?? []
                pages.append(changes.count)
                for change in changes {
                    let data = change["data"] as? [String: Any]
                    seen[change["id"] as! String] = data?["body"] as? String
                    #expect(data?["é"] as? String == "ü\n\"q\"")
                }
                cursor = page.json["cursor"] as? String
                if page.json["has_more"] as? Bool != true { break }
            }
            #expect(seen == texts, "every record once, its data intact")
            #expect(pages.count >= 2 && pages.first! <= 21, "32 records of 200 KiB do not fit one 4 MiB page: \(pages)")
        }
    }

    @Test func revokingADeviceClosesItsStreamAndStreamingCountsAsSeen() async throws {
        try await Stack.with(workers: 1, fanouts: 2) { stack in
            let api = stack.client
            let token = await E2E.token("lost-phone-\(UUID().uuidString.prefix(6))")
            let phone = try await api.registerDevice(token, name: "phone")
            let laptop = try await api.registerDevice(token, name: "laptop")
            let pool = PGPool(url: E2E.databaseURL!, size: 1, logger: E2E.logger)
            defer { Task { await pool.shutdown() } }
            try await pool.execute("UPDATE devices SET last_seen_at = now() - interval '80 days' WHERE device_id = \(phone)::uuid")
            // The phone listens on both replicas, the laptop on one.
            let streams = try stack.fanouts.map { try SSEClient(port: $0.port, path: "/v1/stream?device_id=\(phone)&access_token=\(token)") }
            let laptopStream = try SSEClient(port: stack.fanouts[0].port, path: "/v1/stream?device_id=\(laptop)&access_token=\(token)")
            defer { (streams + [laptopStream]).forEach { $0.close() } }
            for stream in streams + [laptopStream] { _ = try await stream.inbox.next("hello") }
            let fresh = try await pool.value(
                "SELECT last_seen_at > now() - interval '1 minute' FROM devices WHERE device_id = \(phone)::uuid", as: Bool.self)
            #expect(fresh == true, "a stream connection counts as seen")

            #expect(try await api.request("DELETE", "/v1/devices/\(phone)", token: token).status == 204)
            for (index, stream) in streams.enumerated() {
                _ = try await eventually(within: 3, "phone stream \(index) closed") { stream.inbox.finished ? true : nil }
            }
            // The laptop keeps listening and still gets pokes.
            #expect(!laptopStream.inbox.finished)
        }
    }
}
