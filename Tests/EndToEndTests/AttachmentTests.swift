import Crypto
import Foundation
import PQBridge
import Testing
import TestSupport

/// Attachments: files by SHA-256 per space, with the real gateway, worker and
/// purge, over both stores. Every test that touches bytes runs once per store.
@Suite(.serialized, .timeLimit(.minutes(5)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct AttachmentTests {
    enum Store: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case postgres, file
        var testDescription: String { rawValue }
    }

    /// A fresh directory per stack for the file store.
    static func environment(_ store: Store) -> (env: [String: String], directory: String?) {
        switch store {
        case .postgres:
            return (["BLOB_STORE": "postgres"], nil)
        case .file:
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("blobs-\(UUID().uuidString)").path
            return (["BLOB_STORE": "file:\(directory)"], directory)
        }
    }

    /// Bytes no two calls share and gzip cannot shrink: a seeded generator's words from a
    /// random seed (a system random byte each would be a system call each: 24 MiB of them
    /// took seconds of a core).
    static func randomBytes(_ count: Int) -> Data {
        var generator = SplitMix64(state: .random(in: .min ... .max))
        var bytes = Data(count: (count + 7) / 8 * 8)
        bytes.withUnsafeMutableBytes { raw in
            for offset in stride(from: 0, to: raw.count, by: 8) { raw.storeBytes(of: generator.next(), toByteOffset: offset, as: UInt64.self) }
        }
        return bytes.prefix(count)
    }

    static func sha256(_ data: Data) -> String { SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined() }

    static func reference(_ data: Data, _ sha256: String, type: String = "image/jpeg") -> [String: Any] {
        ["$blob": ["sha256": sha256, "size": data.count, "content_type": type]]
    }

    static func put(
        _ api: APIClient, _ token: String, _ data: Data, sha256: String? = nil, space: String? = nil, type: String = "image/jpeg"
    ) async throws -> HTTPResult {
        let name = sha256 ?? Self.sha256(data)
        return try await api.request(
            "PUT", "/v1/blobs/\(name)" + (space.map { "?space_id=\($0)" } ?? ""), token: token, body: data,
            headers: ["Content-Type": type])
    }

    /// Whether the store still holds any bytes of the file's object(s) or of objects no file points at.
    static func storedObjects(_ pool: PGPool, store: Store, directory: String?, sha256: String) async throws -> Int {
        switch store {
        case .postgres:
            return try await pool.value("""
                SELECT count(*)::int FROM blob_chunks c WHERE c.object_id IN (
                  SELECT object_id FROM blob_garbage WHERE sha256 = \(sha256)
                  UNION SELECT object_id FROM blobs WHERE sha256 = \(sha256))
                  OR NOT EXISTS (SELECT 1 FROM blobs b WHERE b.object_id = c.object_id)
                     AND NOT EXISTS (SELECT 1 FROM blob_uploads u WHERE u.upload_id = c.object_id)
                """) ?? 0
        case .file:
            guard let directory else { return 0 }
            let sealed = (try? FileManager.default.contentsOfDirectory(atPath: "\(directory)/\(sha256.prefix(2))"))?
                .filter { $0.hasPrefix(sha256) }.count ?? 0
            let staged = (try? FileManager.default.contentsOfDirectory(atPath: "\(directory)/staging"))?.count ?? 0
            return sealed + staged
        }
    }

    @Test(arguments: Store.allCases)
    func uploadAndDownloadByteForByteWithRangesHeadAndETags(store: Store) async throws {
        let (env, _) = Self.environment(store)
        try await InProcessStack.with(workers: 1, environment: env) { stack in
            let api = stack.client
            let token = await E2E.token("files-\(UUID().uuidString.prefix(6))")
            let data = Self.randomBytes(3 * 1024 * 1024 + 12345)
            let sha = Self.sha256(data)
            let created = try await Self.put(api, token, data, type: "image/png")
            #expect(created.status == 201, "\(created.text)")
            #expect(created.json["sha256"] as? String == sha && created.json["size"] as? Int == data.count)
            #expect(created.json["content_type"] as? String == "image/png")
            let again = try await Self.put(api, token, data, type: "image/png")
            #expect(again.status == 200, "\(again.text)")

            let whole = try await api.request("GET", "/v1/blobs/\(sha)", token: token)
            #expect(whole.status == 200 && whole.body == data)
            #expect(whole.header("Content-Type") == "image/png")
            #expect(whole.header("ETag") == "\"\(sha)\"")
            #expect(whole.header("Cache-Control") == "private, max-age=31536000, immutable")

            let head = try await api.request("HEAD", "/v1/blobs/\(sha)", token: token)
            #expect(head.status == 200 && head.body.isEmpty && head.header("Content-Length") == String(data.count))

            let part = try await api.request("GET", "/v1/blobs/\(sha)", token: token, headers: ["Range": "bytes=1048570-1048600"])
            #expect(part.status == 206 && part.body == data[1048570...1048600])
            #expect(part.header("Content-Range") == "bytes 1048570-1048600/\(data.count)")
            let tail = try await api.request("GET", "/v1/blobs/\(sha)", token: token, headers: ["Range": "bytes=-100"])
            #expect(tail.status == 206 && tail.body == data.suffix(100))
            let beyond = try await api.request("GET", "/v1/blobs/\(sha)", token: token, headers: ["Range": "bytes=\(data.count)-"])
            #expect(beyond.status == 416 && beyond.header("Content-Range") == "bytes */\(data.count)")

            let cached = try await api.request("GET", "/v1/blobs/\(sha)", token: token, headers: ["If-None-Match": "\"\(sha)\""])
            #expect(cached.status == 304 && cached.body.isEmpty)
        }
    }

    @Test(arguments: Store.allCases)
    func aHashMismatchStoresNothing(store: Store) async throws {
        let (env, directory) = Self.environment(store)
        let pool = PGPool(url: E2E.databaseURL!, size: 1, logger: E2E.logger)
        try await InProcessStack.with(workers: 1, environment: env) { stack in
            let token = await E2E.token("mismatch-\(UUID().uuidString.prefix(6))")
            let data = Self.randomBytes(2 * 1024 * 1024 + 7)
            let claimed = Self.sha256(Data("something else".utf8))
            let refused = try await Self.put(stack.client, token, data, sha256: claimed)
            #expect(refused.status == 422 && refused.json["code"] as? String == "hash_mismatch", "\(refused.text)")
            #expect(try await pool.value("SELECT count(*)::int FROM blobs WHERE sha256 = \(claimed)") == 0)
            #expect(try await pool.value("SELECT count(*)::int FROM blob_garbage WHERE sha256 = \(claimed)") == 0)
            #expect(try await Self.storedObjects(pool, store: store, directory: directory, sha256: claimed) == 0)
            #expect(try await stack.client.request("GET", "/v1/blobs/\(claimed)", token: token).status == 404)
        }
        await pool.shutdown()
    }

    /// Sends a PATCH whose body is cut after `sent` of its `declared` bytes.
    static func cutPatch(port: Int, path: String, token: String, offset: Int, body: Data, declared: Int) throws {
        guard let fd = Loopback.connect(port: port) else { throw StackError(description: "cannot connect to :\(port)") }
        defer { close(fd) }
        let head = "PATCH \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(token)\r\nTus-Resumable: 1.0.0\r\n"
            + "Upload-Offset: \(offset)\r\nContent-Type: application/offset+octet-stream\r\nContent-Length: \(declared)\r\n\r\n"
        let bytes = Data(head.utf8) + body
        try bytes.withUnsafeBytes { buffer in
            var done = 0
            while done < buffer.count {
                let written = send(fd, buffer.baseAddress! + done, buffer.count - done, Int32(MSG_NOSIGNAL))
                guard written > 0 else { throw StackError(description: "send failed") }
                done += written
            }
        }
        // Let the gateway take in what came before the connection is cut.
        usleep(500_000)
    }

    @Test(arguments: Store.allCases)
    func aCutUploadResumesWithTusAcrossAGatewayRestart(store: Store) async throws {
        let (env, _) = Self.environment(store)
        try await Stack.with(workers: 1, environment: env) { stack in
            let token = await E2E.token("tus-\(UUID().uuidString.prefix(6))")
            let data = Self.randomBytes(5 * 1024 * 1024 + 99)
            let sha = Self.sha256(data)
            func b64(_ text: String) -> String { Data(text.utf8).base64EncodedString() }
            let tus = ["Tus-Resumable": "1.0.0"]
            let created = try await stack.client.request("POST", "/v1/uploads", token: token, headers: tus.merging([
                "Upload-Length": String(data.count), "Upload-Metadata": "sha256 \(b64(sha)),content_type \(b64("image/jpeg"))",
            ]) { $1 })
            #expect(created.status == 201, "\(created.text)")
            let location = try #require(created.header("Location"))

            // 2.5 MiB of 5 MiB arrive, then the connection is cut.
            try Self.cutPatch(
                port: stack.gateway.port, path: location, token: token, offset: 0, body: data.prefix(2_621_440), declared: data.count)
            // The gateway may still be storing pieces that arrived before the cut: the offset
            // counts once it stays the same for half a second.
            func offset() async throws -> Int? {
                Int(try await stack.client.request("HEAD", location, token: token, headers: tus).header("Upload-Offset") ?? "")
            }
            let afterCut = try await eventually(within: 10, "the upload's offset after the cut") { () -> Int? in
                guard let first = try await offset(), first > 0 else { return nil }
                try await Task.sleep(for: .milliseconds(500))
                return try await offset() == first ? first : nil
            }
            #expect(afterCut % (1 << 20) == 0 && afterCut <= 2_621_440, "whole pieces only: \(afterCut)")

            try await stack.replaceGateway()
            let head = try await stack.client.request("HEAD", location, token: token, headers: tus)
            #expect(head.status == 200 && head.header("Upload-Offset") == String(afterCut) && head.header("Upload-Length") == String(data.count))
            let wrongOffset = try await stack.client.request("PATCH", location, token: token, body: data.suffix(from: 1), headers: tus.merging([
                "Upload-Offset": "1", "Content-Type": "application/offset+octet-stream"]) { $1 })
            #expect(wrongOffset.status == 409)
            let rest = try await stack.client.request("PATCH", location, token: token, body: data.suffix(from: afterCut), headers: tus.merging([
                "Upload-Offset": String(afterCut), "Content-Type": "application/offset+octet-stream"]) { $1 })
            #expect(rest.status == 204 && rest.header("Upload-Offset") == String(data.count), "\(rest.status) \(rest.text)")

            let downloaded = try await stack.client.request("GET", "/v1/blobs/\(sha)", token: token)
            #expect(downloaded.status == 200 && downloaded.body == data && downloaded.header("Content-Type") == "image/jpeg")
            // Terminated uploads are gone.
            let other = try await stack.client.request("POST", "/v1/uploads", token: token, headers: tus.merging([
                "Upload-Length": "10", "Upload-Metadata": "sha256 \(b64(sha))"]) { $1 })
            let otherLocation = try #require(other.header("Location"))
            #expect(try await stack.client.request("DELETE", otherLocation, token: token, headers: tus).status == 204)
            #expect(try await stack.client.request("HEAD", otherLocation, token: token, headers: tus).status == 404)
        }
    }

    @Test func aPushBeforeItsUploadGets409AndCreatesNoJob() async throws {
        let pool = PGPool(url: E2E.databaseURL!, size: 1, logger: E2E.logger)
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let user = "early-\(UUID().uuidString.prefix(6))"
            let token = await E2E.token(user)
            let device = try await api.registerDevice(token)
            let photo = Self.randomBytes(40_000)
            let sha = Self.sha256(photo)
            let ops: [[String: Any]] = [
                ["op_id": newOpID(), "type": "upsert", "collection": "recipes", "id": "soup", "data": ["title": "Soup"]],
                ["op_id": newOpID(), "type": "patch", "collection": "recipes", "id": "soup",
                 "data": ["steps": [["text": "Stir", "photo": Self.reference(photo, sha)]]]],
            ]
            let early = try await api.push(token, device: device, ops: ops)
            #expect(early.status == 409 && early.json["code"] as? String == "blob_missing", "\(early.text)")
            #expect(early.json["op_index"] as? Int == 1 && early.json["sha256"] as? String == sha
                && early.json["pointer"] as? String == "/ops/1/data", "\(early.text)")
            #expect(try await pool.value("SELECT count(*)::int FROM jobs WHERE user_id = \(user)") == 0)

            #expect(try await Self.put(api, token, photo).status == 201)
            let accepted = try await api.push(token, device: device, ops: ops)
            #expect(accepted.status == 202, "\(accepted.text)")
            _ = try await api.awaitJob(token, try #require(accepted.json["job_id"] as? String))
            let (changes, _) = try await api.pullAll(token)
            let steps = (changes.last?["data"] as? [String: Any])?["steps"] as? [[String: Any]]
            #expect(((steps?.first?["photo"] as? [String: Any])?["$blob"] as? [String: Any])?["sha256"] as? String == sha)
            #expect(try await pool.value("SELECT ref_count FROM blobs WHERE sha256 = \(sha)") == 1)

            let malformed = try await api.push(token, device: device, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "recipes", "id": "bad", "data": ["photo": ["$blob": ["sha256": "nope"]]]],
            ])
            #expect(malformed.status == 422, "\(malformed.text)")
        }
        await pool.shutdown()
    }

    @Test func anotherSpacesFileIsByteForByteAnUnknownHash() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let alice = await E2E.token("alice-\(UUID().uuidString.prefix(6))")
            let bob = await E2E.token("bob-\(UUID().uuidString.prefix(6))")
            let file = Self.randomBytes(5000)
            let sha = Self.sha256(file)
            #expect(try await Self.put(api, alice, file).status == 201)
            let shared = try await api.json("POST", "/v1/spaces", token: alice, ["name": "Boat"])
            let space = try #require(shared.json["space_id"] as? String)
            #expect(try await Self.put(api, alice, file, space: space).status == 201)
            let personal = try #require(try await api.request("GET", "/v1/spaces", token: alice).json["items"] as? [[String: Any]])
                .first { $0["personal"] as? Bool == true }?["space_id"] as? String

            let unknown = Self.sha256(Self.randomBytes(64))
            let baseline = try await api.request("GET", "/v1/blobs/\(unknown)", token: bob)
            #expect(baseline.status == 404)
            for path in [
                "/v1/blobs/\(sha)?space_id=\(space)", "/v1/blobs/\(sha)?space_id=\(try #require(personal))",
                "/v1/blobs/\(unknown)?space_id=\(space)", "/v1/blobs/\(sha)", "/v1/blobs/\(sha)?space_id=\(UUID().uuidString.lowercased())",
            ] {
                let answer = try await api.request("GET", path, token: bob)
                #expect(answer.status == 404 && answer.body == baseline.body, "\(path): \(answer.text)")
                #expect(answer.header("Content-Type") == baseline.header("Content-Type"))
            }
            // Bob must send the whole file to have it: his upload is a new file of his, not a hit.
            #expect(try await Self.put(api, bob, file).status == 201)
            #expect(try await Self.put(api, bob, Data("x".utf8), sha256: sha).status == 422)
            #expect(try await Self.put(api, bob, file, space: space).status == 404, "not a member")
        }
    }

    @Test func aPublicRecordsFileIsReadableUntilUnpublished() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let token = await E2E.token("skipper-\(UUID().uuidString.prefix(6))")
            let device = try await api.registerDevice(token)
            let chart = Self.randomBytes(70_000)
            let sha = Self.sha256(chart)
            let secret = Self.randomBytes(300)
            #expect(try await Self.put(api, token, chart, type: "image/png").status == 201)
            #expect(try await Self.put(api, token, secret).status == 201)
            let publicID = "chart-\(UUID().uuidString.prefix(8).lowercased())"
            let push = try await api.push(token, device: device, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "guides", "id": "g1",
                 "data": ["title": "Harbour", "chart": Self.reference(chart, sha, type: "image/png")]],
                ["op_id": newOpID(), "type": "publish", "collection": "guides", "id": "g1", "public_id": publicID],
            ])
            _ = try await api.awaitJob(token, try #require(push.json["job_id"] as? String))
            let path = "/v1/public/\(publicID)/blobs/\(sha)"
            let read = try await api.request("GET", path, headers: ["Origin": "https://reader.example"])
            #expect(read.status == 200 && read.body == chart && read.header("Content-Type") == "image/png", "\(read.text)")
            #expect(read.header("Access-Control-Allow-Origin") == "*")
            let notReferenced = try await api.request("GET", "/v1/public/\(publicID)/blobs/\(Self.sha256(secret))")
            #expect(notReferenced.status == 404)
            let unpublish = try await api.push(token, device: device, ops: [
                ["op_id": newOpID(), "type": "unpublish", "collection": "guides", "id": "g1"],
            ])
            _ = try await api.awaitJob(token, try #require(unpublish.json["job_id"] as? String))
            let after = try await api.request("GET", path)
            #expect(after.status == 404 && after.body == notReferenced.body)
        }
    }

    @Test func aForkReadsTheSourcesFiles() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let alice = await E2E.token("author-\(UUID().uuidString.prefix(6))")
            let bob = await E2E.token("forker-\(UUID().uuidString.prefix(6))")
            let aliceDevice = try await api.registerDevice(alice)
            let bobDevice = try await api.registerDevice(bob)
            let picture = Self.randomBytes(90_000)
            let sha = Self.sha256(picture)
            #expect(try await Self.put(api, alice, picture).status == 201)
            let publicID = "list-\(UUID().uuidString.prefix(8).lowercased())"
            let push = try await api.push(alice, device: aliceDevice, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "checklists", "id": "c1",
                 "data": ["title": "Rigging", "picture": Self.reference(picture, sha)]],
                ["op_id": newOpID(), "type": "publish", "collection": "checklists", "id": "c1", "public_id": publicID],
            ])
            _ = try await api.awaitJob(alice, try #require(push.json["job_id"] as? String))
            #expect(try await api.request("GET", "/v1/blobs/\(sha)", token: bob).status == 404)
            let fork = try await api.push(bob, device: bobDevice, ops: [
                ["op_id": newOpID(), "type": "fork", "collection": "checklists", "id": "mine", "public_id": publicID],
            ])
            #expect(fork.status == 202, "\(fork.text)")
            let job = try await api.awaitJob(bob, try #require(fork.json["job_id"] as? String))
            #expect((job["results"] as? [[String: Any]])?.first?["status"] as? String == "applied", "\(job)")
            let copy = try await api.request("GET", "/v1/blobs/\(sha)", token: bob)
            #expect(copy.status == 200 && copy.body == picture)
        }
    }

    @Test(arguments: Store.allCases)
    func purgeRemovesOnlyFilesNoRecordReferences(store: Store) async throws {
        let (env, directory) = Self.environment(store)
        let pool = PGPool(url: E2E.databaseURL!, size: 1, logger: E2E.logger)
        try await InProcessStack.with(workers: 1, environment: env) { stack in
            let api = stack.client
            let token = await E2E.token("keeper-\(UUID().uuidString.prefix(6))")
            let device = try await api.registerDevice(token)
            let (kept, never, dropped, tombstoned) = (Self.randomBytes(1000), Self.randomBytes(1100), Self.randomBytes(1200), Self.randomBytes(1300))
            for file in [kept, never, dropped, tombstoned] { #expect(try await Self.put(api, token, file).status == 201) }
            let push = try await api.push(token, device: device, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": "a", "data": ["f": Self.reference(kept, Self.sha256(kept))]],
                ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": "b", "data": ["f": Self.reference(dropped, Self.sha256(dropped))]],
                ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": "c", "data": ["f": Self.reference(tombstoned, Self.sha256(tombstoned))]],
            ])
            _ = try await api.awaitJob(token, try #require(push.json["job_id"] as? String))
            // Then b stops referencing its file, and c is deleted: its tombstone (within its
            // retention) keeps the file c referenced.
            let changes = try await api.push(token, device: device, ops: [
                ["op_id": newOpID(), "type": "patch", "collection": "notes", "id": "b", "data": ["f": NSNull()]],
                ["op_id": newOpID(), "type": "delete", "collection": "notes", "id": "c"],
            ])
            _ = try await api.awaitJob(token, try #require(changes.json["job_id"] as? String))
            try await Task.sleep(for: .milliseconds(1500))
            let log = FileManager.default.temporaryDirectory.appendingPathComponent("purge-\(UUID().uuidString).log").path
            let status = Shell.run(
                "BLOB_RETENTION=1s TOMBSTONE_RETENTION=1h BLOB_STORE='\(env["BLOB_STORE"]!)' \(E2E.binaries)/purge --once > \(log) 2>&1")
            #expect(status == 0, "\((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
            for (file, present) in [(kept, true), (never, false), (dropped, false), (tombstoned, true)] {
                let sha = Self.sha256(file)
                let answer = try await api.request("GET", "/v1/blobs/\(sha)", token: token)
                #expect(answer.status == (present ? 200 : 404), "\(sha): \(answer.status)")
                if present { #expect(answer.body == file) }
                #expect(try await Self.storedObjects(pool, store: store, directory: directory, sha256: sha) == (present ? 1 : 0))
            }
            // Once the tombstone is purged, its file's retention starts; when that passes, it goes.
            func purge(_ retention: String) -> Int32 {
                Shell.run("BLOB_RETENTION=1s TOMBSTONE_RETENTION=\(retention) BLOB_STORE='\(env["BLOB_STORE"]!)' \(E2E.binaries)/purge --once > /dev/null 2>&1")
            }
            let tombstonedSHA = Self.sha256(tombstoned)
            #expect(purge("1s") == 0)
            #expect(try await pool.value("SELECT ref_count FROM blobs WHERE sha256 = \(tombstonedSHA)") == 0)
            #expect(try await api.request("GET", "/v1/blobs/\(tombstonedSHA)", token: token).status == 200)
            try await Task.sleep(for: .milliseconds(1500))
            #expect(purge("1s") == 0)
            #expect(try await api.request("GET", "/v1/blobs/\(tombstonedSHA)", token: token).status == 404)
            #expect(try await api.request("GET", "/v1/blobs/\(Self.sha256(kept))", token: token).status == 200)
        }
        await pool.shutdown()
    }

    /// A file referenced only by a push still waiting for a worker is kept.
    @Test func purgeKeepsAFileAJobNotYetAppliedReferences() async throws {
        let pool = PGPool(url: E2E.databaseURL!, size: 1, logger: E2E.logger)
        try await Stack.with(workers: 0) { stack in
            let api = stack.client
            let token = await E2E.token("pending-\(UUID().uuidString.prefix(6))")
            let device = try await api.registerDevice(token)
            let file = Self.randomBytes(4000)
            let sha = Self.sha256(file)
            #expect(try await Self.put(api, token, file).status == 201)
            try await Task.sleep(for: .milliseconds(1200))
            let push = try await api.push(token, device: device, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": "p", "data": ["f": Self.reference(file, sha)]],
            ])
            #expect(push.status == 202)
            try await Task.sleep(for: .milliseconds(1500))
            #expect(Shell.run("BLOB_RETENTION=1s \(E2E.binaries)/purge --once > /dev/null 2>&1") == 0)
            #expect(try await api.request("GET", "/v1/blobs/\(sha)", token: token).status == 200)
            try await stack.addWorker()
            _ = try await api.awaitJob(token, try #require(push.json["job_id"] as? String))
            #expect(try await pool.value("SELECT ref_count FROM blobs WHERE sha256 = \(sha)") == 1)
        }
        await pool.shutdown()
    }

    @Test(arguments: Store.allCases)
    func deletingASpaceOrAnAccountLeavesNoFileBehind(store: Store) async throws {
        let (env, directory) = Self.environment(store)
        let pool = PGPool(url: E2E.databaseURL!, size: 1, logger: E2E.logger)
        try await InProcessStack.with(workers: 1, environment: env) { stack in
            let api = stack.client
            let token = await E2E.token("leaver-\(UUID().uuidString.prefix(6))")
            let shared = try await api.json("POST", "/v1/spaces", token: token, ["name": "Galley"])
            let space = try #require(shared.json["space_id"] as? String)
            let inSpace = Self.randomBytes(2 * 1024 * 1024 + 5), personal = Self.randomBytes(3000)
            #expect(try await Self.put(api, token, inSpace, space: space).status == 201)
            #expect(try await Self.put(api, token, personal).status == 201)
            #expect(try await api.request("DELETE", "/v1/spaces/\(space)", token: token).status == 204)
            _ = try await eventually(within: 10, "the space's file removed") { () -> Bool? in
                try await Self.storedObjects(pool, store: store, directory: directory, sha256: Self.sha256(inSpace)) == 0 ? true : nil
            }
            #expect(try await pool.value("SELECT count(*)::int FROM blobs WHERE sha256 = \(Self.sha256(inSpace))") == 0)
            #expect(try await api.request("DELETE", "/v1/me", token: token).status == 204)
            #expect(try await Self.storedObjects(pool, store: store, directory: directory, sha256: Self.sha256(personal)) == 0)
            #expect(try await pool.value("SELECT count(*)::int FROM blobs WHERE sha256 = \(Self.sha256(personal))") == 0)
        }
        await pool.shutdown()
    }

    /// `syncctl blobs`: list and verify a space's files, and move them between the stores
    /// while the gateway (reading both, as `BLOB_STORE=file:…` does) serves them.
    @Test func syncctlListsVerifiesAndMovesFilesBetweenStores() async throws {
        let (env, directory) = Self.environment(.file)
        let dir = try #require(directory)
        try await InProcessStack.with(workers: 1, environment: env) { stack in
            let api = stack.client
            let token = await E2E.token("operator-\(UUID().uuidString.prefix(6))")
            let small = Self.randomBytes(3000), large = Self.randomBytes(2 * 1024 * 1024 + 17)
            for file in [small, large] { #expect(try await Self.put(api, token, file).status == 201) }
            let space = try #require(try await api.request("GET", "/v1/spaces", token: token).json["items"] as? [[String: Any]])
                .first { $0["personal"] as? Bool == true }?["space_id"] as? String
            let output = FileManager.default.temporaryDirectory.appendingPathComponent("syncctl-\(UUID().uuidString).txt").path
            defer { try? FileManager.default.removeItem(atPath: output) }
            func syncctl(_ arguments: String) -> (Int32, String) {
                let status = Shell.run("BLOB_STORE='file:\(dir)' \(E2E.binaries)/syncctl blobs \(arguments) > \(output) 2>&1")
                return (status, (try? String(contentsOfFile: output, encoding: .utf8)) ?? "")
            }
            func stores() throws -> [String] {
                let (status, text) = syncctl("list --space \(space!)")
                #expect(status == 0, "\(text)")
                let items = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [[String: Any]] ?? []
                return items.compactMap { $0["store"] as? String }
            }
            func readable() async throws {
                for file in [small, large] {
                    #expect(try await api.request("GET", "/v1/blobs/\(Self.sha256(file))", token: token).body == file)
                }
            }
            #expect(try stores() == ["file", "file"])
            let (verified, report) = syncctl("verify --space \(try #require(space))")
            #expect(verified == 0 && report.contains(" ok "), "\(report)")

            let (toPostgres, moved) = syncctl("migrate --to postgres --from-directory \(dir) --space \(space!)")
            #expect(toPostgres == 0 && moved.contains("moved 2 files"), "\(moved)")
            #expect(try stores() == ["postgres", "postgres"])
            try await readable()
            let sealed = try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.count == 2 }
                .flatMap { (try? FileManager.default.contentsOfDirectory(atPath: "\(dir)/\($0)")) ?? [] }
            #expect(sealed.isEmpty, "the moved files left the directory: \(sealed)")

            let (toFile, back) = syncctl("migrate --to file:\(dir) --space \(space!)")
            #expect(toFile == 0 && back.contains("moved 2 files"), "\(back)")
            #expect(try stores() == ["file", "file"])
            try await readable()

            // A damaged file is found.
            let sha = Self.sha256(small)
            let name = try #require(try FileManager.default.contentsOfDirectory(atPath: "\(dir)/\(sha.prefix(2))").first { $0.hasPrefix(sha) })
            try Data("damaged".utf8).write(to: URL(fileURLWithPath: "\(dir)/\(sha.prefix(2))/\(name)"))
            let (damaged, found) = syncctl("verify --space \(space!)")
            #expect(damaged != 0 && found.contains("\(sha) damaged"), "\(found)")
        }
    }
}
