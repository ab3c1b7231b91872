import Foundation
import Testing

#if canImport(Glibc)
import Glibc
import TestSupport
#endif

/// No one user can exhaust the gateway through files, and uploads obey the same authority
/// as pushes: readers that stop reading and uploads that trickle are closed, downloads and
/// uploads at once are capped, open uploads count against the quota and are capped and
/// expire, and an uploader who loses write access stores nothing more.
@Suite(.serialized, .timeLimit(.minutes(5)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct FileLimitTests {
    /// A connection that sent `head` (and `body`), over which nothing is read yet.
    static func send(_ port: Int, _ head: String, body: Data = Data(), receiveBuffer: Int32? = nil) throws -> Int32 {
        guard let fd = Loopback.connect(port: port, receiveBuffer: receiveBuffer) else {
            throw StackError(description: "cannot connect to :\(port)")
        }
        let bytes = Data(head.utf8) + body
        _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        return fd
    }

    /// Reads everything until the server closes the connection: the bytes read, or nil
    /// when it is still open after `seconds`.
    static func bytesUntilClosed(_ fd: Int32, within seconds: Double) -> Int? {
        var timeout = timeval(tv_sec: 1, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let deadline = Date().addingTimeInterval(seconds)
        var total = 0
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while Date() < deadline {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n == 0 { return total }
            if n > 0 {
                total += n
            } else if errno == ECONNRESET {
                return total
            }
        }
        return nil
    }

    static func get(_ sha: String, _ token: String) -> String {
        "GET /v1/blobs/\(sha) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\n\r\n"
    }

    static func putHead(_ sha: String, _ token: String, length: Int, space: String? = nil) -> String {
        "PUT /v1/blobs/\(sha)\(space.map { "?space_id=\($0)" } ?? "") HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\n"
            + "Content-Type: application/octet-stream\r\nContent-Length: \(length)\r\n\r\n"
    }

    @Test func aReaderThatStopsReadingIsClosedAndDownloadsAreCappedPerUser() async throws {
        let environment = ["TRANSFER_STALL_TIMEOUT": "2s", "DOWNLOADS_PER_USER": "2"]
        try await InProcessStack.with(workers: 0, environment: environment) { stack in
            let api = stack.client
            let token = await E2E.token("reader-\(UUID().uuidString.prefix(6))")
            let file = AttachmentTests.randomBytes(24 << 20)
            let sha = AttachmentTests.sha256(file)
            #expect(try await AttachmentTests.put(api, token, file).status == 201)
            let stalled = try (0..<2).map { _ in try Self.send(stack.port, Self.get(sha, token), receiveBuffer: 16 << 10) }
            defer { stalled.forEach { close($0) } }
            try await Task.sleep(for: .milliseconds(500))
            let third = try await api.request("GET", "/v1/blobs/\(sha)", token: token)
            #expect(third.status == 429 && third.json["code"] as? String == "rate_limited" && third.header("Retry-After") != nil)
            #expect(try await api.request("HEAD", "/v1/blobs/\(sha)", token: token).status == 200, "a HEAD sends no body and takes no slot")
            // Neither reader reads: each is closed once its buffer has stayed full for 2 s.
            try await Task.sleep(for: .seconds(5))
            for fd in stalled {
                let received = Self.bytesUntilClosed(fd, within: 15)
                #expect(received.map { $0 < file.count } == true, "a stalled download was not closed: \(String(describing: received))")
            }
            let after = try await api.request("GET", "/v1/blobs/\(sha)", token: token)
            #expect(after.status == 200 && after.body == file, "the slots are given back")
        }
    }

    /// Many readers that stop together: most wait on a small piece with a writable channel,
    /// and are closed all the same, each within the stall timeout of its last progress.
    @Test func manyReadersThatStopTogetherAreAllClosed() async throws {
        let environment = ["TRANSFER_STALL_TIMEOUT": "2s", "DOWNLOADS_PER_USER": "40", "DOWNLOAD_BUFFER": "64KiB"]
        try await Stack.with(workers: 0, environment: environment) { stack in
            let api = stack.client
            let token = await E2E.token("stalled-\(UUID().uuidString.prefix(6))")
            let file = AttachmentTests.randomBytes(6 << 20)
            let sha = AttachmentTests.sha256(file)
            #expect(try await AttachmentTests.put(api, token, file).status == 201)
            let stalled = try (0..<30).map { _ in try Self.send(stack.gateway.port, Self.get(sha, token), receiveBuffer: 16 << 10) }
            defer { stalled.forEach { close($0) } }
            // The gateway counts each connection it closes for a stalled response. On a
            // loaded machine the last response may start seconds after the first, so the
            // wait is for that count, not for a fixed time.
            let closed = try await eventually(within: 60, "the gateway closed all 30 stalled responses") {
                let count = BatchingTests.metric(
                    #"syncline_http_slow_connections_closed_total{reason="stalled_response"}"#,
                    in: try await BatchingTests.metrics(of: stack.gateway))
                return count >= 30 ? count : nil
            }
            #expect(closed == 30, "only the 30 stalled readers are closed")
            var open = 0
            for fd in stalled {
                // Whatever the kernel holds is read at once; a connection still open then has
                // nothing more coming and is counted.
                if Self.bytesUntilClosed(fd, within: 3) == nil { open += 1 }
            }
            #expect(open == 0, "\(open) of \(stalled.count) stalled readers still connected")
        }
    }

    @Test func anUploadThatTricklesIsClosedAndUploadsAreCappedPerUser() async throws {
        let environment = ["TRANSFER_STALL_TIMEOUT": "2s", "UPLOAD_MIN_RATE": "1KiB", "UPLOADS_PER_USER": "1"]
        try await InProcessStack.with(workers: 0, environment: environment) { stack in
            let api = stack.client
            let token = await E2E.token("trickle-\(UUID().uuidString.prefix(6))")
            let file = AttachmentTests.randomBytes(200_000)
            let sha = AttachmentTests.sha256(file)
            let fd = try Self.send(stack.port, Self.putHead(sha, token, length: file.count), body: file.prefix(10))
            defer { close(fd) }
            try await Task.sleep(for: .milliseconds(300))
            let other = AttachmentTests.randomBytes(1000)
            #expect(try await AttachmentTests.put(api, token, other).status == 429, "one upload at once")
            // One byte every half second.
            let started = Date()
            var closedAfter: Double?
            for index in 10..<40 {
                try await Task.sleep(for: .milliseconds(500))
                let sent = file[index..<index + 1].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, 1, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
                var probe: UInt8 = 0
                if sent < 0 || recv(fd, &probe, 1, Int32(MSG_DONTWAIT | MSG_PEEK)) == 0 {
                    closedAfter = Date().timeIntervalSince(started)
                    break
                }
            }
            #expect(closedAfter.map { $0 < 8 } == true, "the trickling upload was not closed: \(String(describing: closedAfter))")
            try await Task.sleep(for: .milliseconds(300))
            // A fast upload passes, and nothing of the trickled one was kept.
            #expect(try await AttachmentTests.put(api, token, AttachmentTests.randomBytes(3 << 20)).status == 201)
            #expect(try await api.request("GET", "/v1/blobs/\(sha)", token: token).status == 404)
        }
    }

    static func createUpload(_ api: APIClient, _ token: String, length: Int, sha: String, space: String? = nil) async throws -> HTTPResult {
        var metadata = "sha256 \(Data(sha.utf8).base64EncodedString())"
        if let space { metadata += ",space_id \(Data(space.utf8).base64EncodedString())" }
        return try await api.request("POST", "/v1/uploads", token: token, headers: [
            "Tus-Resumable": "1.0.0", "Upload-Length": String(length), "Upload-Metadata": metadata,
        ])
    }

    static func patch(_ api: APIClient, _ token: String, _ location: String, offset: Int, _ bytes: Data) async throws -> HTTPResult {
        try await api.request("PATCH", location, token: token, body: bytes, headers: [
            "Tus-Resumable": "1.0.0", "Upload-Offset": String(offset), "Content-Type": "application/offset+octet-stream",
        ])
    }

    @Test func openUploadsCountAgainstTheQuotaAreCappedAndExpire() async throws {
        // Long enough for the checks before it on a loaded machine (3 s was not).
        let expiry = 8.0
        let environment = ["SPACE_BLOB_QUOTA": "3MiB", "OPEN_UPLOADS_PER_USER": "2", "UPLOAD_EXPIRY": "\(Int(expiry))s"]
        try await InProcessStack.with(workers: 0, environment: environment) { stack in
            let api = stack.client
            let token = await E2E.token("open-\(UUID().uuidString.prefix(6))")
            let opened = Date()
            let big = try await Self.createUpload(api, token, length: 2 << 20, sha: AttachmentTests.sha256(Data("a".utf8)))
            #expect(big.status == 201)
            let tooBig = try await Self.createUpload(api, token, length: 2 << 20, sha: AttachmentTests.sha256(Data("b".utf8)))
            #expect(tooBig.status == 413, "an open upload's declared length counts: \(tooBig.text)")
            #expect(try await AttachmentTests.put(api, token, AttachmentTests.randomBytes(1_500_000)).status == 413)
            let small = try await Self.createUpload(api, token, length: 100, sha: AttachmentTests.sha256(Data("c".utf8)))
            #expect(small.status == 201)
            let third = try await Self.createUpload(api, token, length: 100, sha: AttachmentTests.sha256(Data("d".utf8)))
            #expect(third.status == 429 && third.json["code"] as? String == "rate_limited", "\(third.text)")
            #expect(Date().timeIntervalSince(opened) < expiry, "the checks above outlasted the uploads' expiry")
            // Idle uploads expire: their room and their places come back.
            try await Task.sleep(for: .seconds(expiry + 1 - Date().timeIntervalSince(opened)))
            let location = try #require(big.header("Location"))
            #expect(try await api.request("HEAD", location, token: token, headers: ["Tus-Resumable": "1.0.0"]).status == 404)
            #expect(try await AttachmentTests.put(api, token, AttachmentTests.randomBytes(1_500_000)).status == 201)
            #expect(try await Self.createUpload(api, token, length: 100, sha: AttachmentTests.sha256(Data("e".utf8))).status == 201)
        }
    }

    @Test func anUploaderWhoLosesWriteAccessStoresNothingMore() async throws {
        try await InProcessStack.with(workers: 0) { stack in
            let api = stack.client
            let (space, owner, editor, _) = try await SpaceTests.family(api)
            let file = AttachmentTests.randomBytes(2 << 20)
            let sha = AttachmentTests.sha256(file)

            // A tus upload half sent, then its uploader is made a viewer: the upload ends.
            let created = try await Self.createUpload(api, editor.token, length: file.count, sha: sha, space: space)
            let location = try #require(created.header("Location"))
            #expect(try await Self.patch(api, editor.token, location, offset: 0, file.prefix(1 << 20)).status == 204)
            let demoted = try await api.json("PATCH", "/v1/spaces/\(space)/members/\(editor.user)", token: owner.token, ["role": "viewer"])
            #expect(demoted.status == 200, "\(demoted.text)")
            let rest = try await Self.patch(api, editor.token, location, offset: 1 << 20, file.suffix(from: 1 << 20))
            #expect([403, 404].contains(rest.status), "\(rest.status) \(rest.text)")
            #expect(try await api.request("GET", "/v1/blobs/\(sha)?space_id=\(space)", token: owner.token).status == 404)

            // A PUT still streaming when its uploader is removed: refused, nothing stored.
            let promoted = try await api.json("PATCH", "/v1/spaces/\(space)/members/\(editor.user)", token: owner.token, ["role": "editor"])
            #expect(promoted.status == 200)
            let fd = try Self.send(stack.port, Self.putHead(sha, editor.token, length: file.count, space: space), body: file.prefix(1 << 20))
            defer { close(fd) }
            try await Task.sleep(for: .milliseconds(500))
            #expect(try await api.request("DELETE", "/v1/spaces/\(space)/members/\(editor.user)", token: owner.token).status == 204)
            _ = file.suffix(from: 1 << 20).withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            var timeout = timeval(tv_sec: 10, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var answer = [UInt8](repeating: 0, count: 4096)
            let n = recv(fd, &answer, answer.count, 0)
            let statusLine = String(decoding: answer.prefix(max(0, n)), as: UTF8.self).split(separator: "\r\n").first ?? ""
            #expect(statusLine.contains(" 403 ") || statusLine.contains(" 404 "), "the PUT answered: \(statusLine)")
            #expect(try await api.request("GET", "/v1/blobs/\(sha)?space_id=\(space)", token: owner.token).status == 404)
        }
    }

    /// A gateway given only PostgreSQL deletes a space whose files are in a directory: it
    /// cannot remove those bytes, so the removal is queued, and purge, which is given the
    /// directory, removes them within BLOB_SWEEP_INTERVAL rather than at its next run.
    @Test func bytesInAStoreTheDeletingGatewayLacksGoWithinASweep() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("blobs-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        func sealedFiles() -> Int {
            let names = (try? FileManager.default.subpathsOfDirectory(atPath: directory)) ?? []
            return names.filter { $0.count > 3 && !$0.hasPrefix("staging") && $0.contains("/") }.count
        }
        try await Stack.with(workers: 0, environment: ["BLOB_STORE": "file:\(directory)"]) { stack in
            let api = stack.client
            let owner = try await Member.make(api, "owner")
            let created = try await api.json("POST", "/v1/spaces", token: owner.token, ["name": "Boat"])
            let space = try #require(created.json["space_id"] as? String)
            #expect(try await AttachmentTests.put(api, owner.token, AttachmentTests.randomBytes(5_000), space: space).status == 201)
            #expect(sealedFiles() == 1)
            try await stack.replaceGateway(environment: ["BLOB_STORE": "postgres"])
            let purge = try ServiceProcess(
                executable: "purge --every 1h", name: "purge-sweeping", port: E2E.freePort(),
                environment: ["BLOB_STORE": "file:\(directory)", "BLOB_SWEEP_INTERVAL": "1s"])
            defer { _ = purge.stop() }
            #expect(try await purge.waitUntilReady())
            try await Task.sleep(for: .seconds(1))  // its first run is over
            #expect(try await api.request("DELETE", "/v1/spaces/\(space)", token: owner.token).status == 204)
            _ = try await eventually(within: 10, "the directory's bytes removed") { sealedFiles() == 0 ? true : nil }
        }
    }
}
