import AMQPBridge
import Auth
import BrokerTopology
import Crypto
import Foundation
import PQBridge
import ServiceSupport
import SyncModels
import Testing
import Yams
import TestSupport

/// The OpenAPI document is the single source of truth for the HTTP shapes: every
/// documented operation is exercised against the running gateway, every answer's status
/// must be documented for it, and every JSON answer must carry its schema's required keys.
@Suite("HTTP contract and bad input", .enabled(if: E2E.enabled), .serialized, .timeLimit(.minutes(3)))
struct ContractTests {
    static let documentPath = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Services/Gateway/openapi.yaml").path

    struct Example {
        let operation: String  // "METHOD /path/template"
        let run: (APIClient) async throws -> HTTPResult
    }

    struct Document {
        let root: [String: Any]

        init(text: String) throws {
            root = try #require(try Yams.load(yaml: text) as? [String: Any])
        }

        var operations: [String] {
            let paths = root["paths"] as? [String: Any] ?? [:]
            // A path's own `parameters` are shared by its operations, not one of them.
            return paths.flatMap { path, item in
                (item as? [String: Any] ?? [:]).keys.filter { $0 != "parameters" }.map { "\($0.uppercased()) \(path)" }
            }.sorted()
        }

        func responses(_ operation: String) -> [String: Any] {
            let parts = operation.split(separator: " ", maxSplits: 1).map(String.init)
            let paths = root["paths"] as? [String: Any]
            let item = paths?[parts[1]] as? [String: Any]
            let op = item?[parts[0].lowercased()] as? [String: Any]
            return op?["responses"] as? [String: Any] ?? [:]
        }

        func resolve(_ node: Any?) -> [String: Any]? {
            guard let map = node as? [String: Any] else { return nil }
            if let ref = map["$ref"] as? String {
                let keys = ref.dropFirst(2).split(separator: "/").map(String.init)
                var current: Any? = root
                for key in keys { current = (current as? [String: Any])?[key] }
                return resolve(current)
            }
            return map
        }

        /// Required top-level keys of a schema, following $ref and allOf.
        func requiredKeys(_ schema: Any?) -> Set<String> {
            guard let schema = resolve(schema) else { return [] }
            var keys = Set(schema["required"] as? [String] ?? [])
            for part in schema["allOf"] as? [Any] ?? [] { keys.formUnion(requiredKeys(part)) }
            return keys
        }

        func check(_ operation: String, _ result: HTTPResult) {
            let responses = self.responses(operation)
            guard let response = resolve(responses[String(result.status)]) else {
                Issue.record("\(operation) answered \(result.status), which its document does not list: \(result.text)")
                return
            }
            guard let content = response["content"] as? [String: Any], let (type, media) = content.first, type != "*/*" else { return }
            #expect(result.header("Content-Type")?.hasPrefix(type) == true, "\(operation) \(result.status): content type \(result.header("Content-Type") ?? "-") is not \(type)")
            guard type.contains("json") else { return }
            let body = (try? JSONSerialization.jsonObject(with: result.body)) as? [String: Any]
            let schema = (media as? [String: Any])?["schema"]
            let missing = requiredKeys(schema).subtracting(body?.keys.map { $0 } ?? [])
            #expect(missing.isEmpty, "\(operation) \(result.status) lacks \(missing.sorted()): \(result.text)")
        }
    }

    @Test func everyDocumentedOperationAnswersInItsDocumentedShape() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let served = try await api.request("GET", "/openapi.yaml")
            let file = try String(contentsOfFile: Self.documentPath, encoding: .utf8)
            #expect(served.text == file, "the gateway must serve the document in the repository")
            let document = try Document(text: file)

            let user = "contract-\(UUID().uuidString.prefix(6))"
            let token = await E2E.token(user)
            let device = try await api.registerDevice(token)
            let goodOp: [String: Any] = ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": "n1", "data": ["title": "t"]]
            let accepted = try await api.push(token, device: device, ops: [goodOp])
            let job = try #require(accepted.json["job_id"] as? String)
            _ = try await api.awaitJob(token, job)
            // A published record to read.
            let publicID = "contract-\(UUID().uuidString.prefix(8).lowercased())"
            let published = try await api.push(token, device: device, ops: [
                ["op_id": newOpID(), "type": "publish", "collection": "notes", "id": "n1", "public_id": publicID],
            ])
            _ = try await api.awaitJob(token, try #require(published.json["job_id"] as? String))
            // A dead letter to show and discard: a message naming a job that does not exist.
            let admin = await E2E.token("contract-admin", admin: true)
            let support = await E2E.token("contract-support", admin: true, support: true)
            let deadJob = UUID().uuidString.lowercased()
            let publisher = AMQPPublisher(
                endpoint: try #require(AMQPEndpoint(url: E2E.amqpURL!)), topology: E2E.topology, logger: E2E.logger)
            try await publisher.publish([SynclineTopology.jobMessage(JobRef(space: .random(), job: JobID(deadJob)!), traceID: nil)])
            await publisher.shutdown()
            _ = try await eventually(within: 10, "the unknown job dead-lettered") {
                try await api.request("GET", "/v1/admin/dead-letters/\(deadJob)", token: admin).status == 200 ? true : nil
            }

            let leaver = await E2E.token("contract-leaver-\(UUID().uuidString.prefix(6))")
            _ = try await api.registerDevice(leaver)
            // A shared space with an invitation for a guest.
            let space = try #require(try await api.json("POST", "/v1/spaces", token: token, ["name": "Family"]).json["space_id"] as? String)
            let invitation = try #require(
                try await api.json("POST", "/v1/spaces/\(space)/invitations", token: token, ["role": "viewer"]).json["code"] as? String)
            let guestUser = "contract-guest-\(UUID().uuidString.prefix(6))"
            let guest = await E2E.token(guestUser)
            // A file, referenced by a public record; and one to upload with tus.
            let picture = Data("a picture, as far as the contract is concerned".utf8)
            let sha = SHA256.hash(data: picture).map { String(format: "%02x", $0) }.joined()
            let tusFile = Data("another file, sent with tus".utf8)
            let tusSHA = SHA256.hash(data: tusFile).map { String(format: "%02x", $0) }.joined()
            _ = try await api.request("PUT", "/v1/blobs/\(sha)", token: token, body: picture, headers: ["Content-Type": "image/png"])
            let filePublicID = "contract-file-\(UUID().uuidString.prefix(8).lowercased())"
            let withFile = try await api.push(token, device: device, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": "n2",
                 "data": ["picture": ["$blob": ["sha256": sha, "size": picture.count, "content_type": "image/png"]]]],
                ["op_id": newOpID(), "type": "publish", "collection": "notes", "id": "n2", "public_id": filePublicID],
            ])
            _ = try await api.awaitJob(token, try #require(withFile.json["job_id"] as? String))
            let tus = ["Tus-Resumable": "1.0.0"]
            func createUpload(_ api: APIClient) async throws -> HTTPResult {
                try await api.request("POST", "/v1/uploads", token: token, headers: tus.merging([
                    "Upload-Length": String(tusFile.count), "Upload-Metadata": "sha256 \(Data(tusSHA.utf8).base64EncodedString())"]) { $1 })
            }
            let upload = try #require(try await createUpload(api).header("Location"))
            // The app's backend: a token for the shared space, one for every space, and a feed.
            let scoped = try await api.json("POST", "/v1/admin/service-tokens", token: admin, ["name": "contract", "spaces": [space]])
            let serviceToken = try #require(scoped.json["token"] as? String)
            let serviceTokenID = try #require((scoped.json["service_token"] as? [String: Any])?["token_id"] as? String)
            let everywhere = try #require(
                try await api.json("POST", "/v1/admin/service-tokens", token: admin, ["name": "contract-all"]).json["token"] as? String)
            let servicePush = try await api.json("POST", "/v1/service/spaces/\(space)/push", token: serviceToken, ["ops": [
                ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": "s1", "data": ["by": "backend"]],
            ]])
            let serviceJob = try #require(servicePush.json["job_id"] as? String)
            let feed = try await api.json("POST", "/v1/admin/feeds", token: admin, ["url": "https://feed.example.invalid/in", "spaces": [space]])
            let feedID = try #require((feed.json["feed"] as? [String: Any])?["feed_id"] as? String)
            let unknownSHA = String(repeating: "0", count: 64)
            let examples: [Example] = [
                Example(operation: "PUT /v1/blobs/{sha256}") { try await $0.request("PUT", "/v1/blobs/\(sha)", token: token, body: picture, headers: ["Content-Type": "image/png"]) },
                Example(operation: "PUT /v1/blobs/{sha256}") { try await $0.request("PUT", "/v1/blobs/\(unknownSHA)", token: token, body: picture, headers: ["Content-Type": "image/png"]) },
                Example(operation: "PUT /v1/blobs/{sha256}") { try await $0.request("PUT", "/v1/blobs/nope", token: token, body: picture) },
                Example(operation: "GET /v1/blobs/{sha256}") { try await $0.request("GET", "/v1/blobs/\(sha)", token: token) },
                Example(operation: "GET /v1/blobs/{sha256}") { try await $0.request("GET", "/v1/blobs/\(sha)", token: token, headers: ["Range": "bytes=0-3"]) },
                Example(operation: "GET /v1/blobs/{sha256}") { try await $0.request("GET", "/v1/blobs/\(sha)", token: token, headers: ["Range": "bytes=9999-"]) },
                Example(operation: "GET /v1/blobs/{sha256}") { try await $0.request("GET", "/v1/blobs/\(unknownSHA)", token: token) },
                Example(operation: "HEAD /v1/blobs/{sha256}") { try await $0.request("HEAD", "/v1/blobs/\(sha)", token: token) },
                Example(operation: "GET /v1/public/{public_id}/blobs/{sha256}") { try await $0.request("GET", "/v1/public/\(filePublicID)/blobs/\(sha)") },
                Example(operation: "GET /v1/public/{public_id}/blobs/{sha256}") { try await $0.request("GET", "/v1/public/\(publicID)/blobs/\(sha)") },
                Example(operation: "HEAD /v1/public/{public_id}/blobs/{sha256}") { try await $0.request("HEAD", "/v1/public/\(filePublicID)/blobs/\(sha)") },
                Example(operation: "OPTIONS /v1/uploads") { try await $0.request("OPTIONS", "/v1/uploads") },
                Example(operation: "POST /v1/uploads") { try await createUpload($0) },
                Example(operation: "POST /v1/uploads") { try await $0.request("POST", "/v1/uploads", token: token, headers: ["Upload-Length": "3"]) },
                Example(operation: "HEAD /v1/uploads/{upload_id}") { try await $0.request("HEAD", upload, token: token, headers: tus) },
                Example(operation: "PATCH /v1/uploads/{upload_id}") { try await $0.request("PATCH", upload, token: token, body: tusFile, headers: tus.merging([
                    "Upload-Offset": "0", "Content-Type": "application/offset+octet-stream"]) { $1 }) },
                Example(operation: "PATCH /v1/uploads/{upload_id}") { try await $0.request("PATCH", upload, token: token, body: tusFile, headers: tus.merging([
                    "Upload-Offset": "1", "Content-Type": "application/offset+octet-stream"]) { $1 }) },
                Example(operation: "DELETE /v1/uploads/{upload_id}") { try await $0.request("DELETE", upload, token: token, headers: tus) },
                Example(operation: "DELETE /v1/uploads/{upload_id}") { try await $0.request("DELETE", "/v1/uploads/\(UUID())", token: token, headers: tus) },
                Example(operation: "POST /v1/devices") { try await $0.json("POST", "/v1/devices", token: token, ["name": "x", "platform": "web"]) },
                Example(operation: "POST /v1/devices") { try await $0.json("POST", "/v1/devices", token: token, ["name": 5]) },
                Example(operation: "POST /v1/devices") { try await $0.request("POST", "/v1/devices", token: nil, body: Data("{}".utf8)) },
                Example(operation: "GET /v1/devices") { try await $0.request("GET", "/v1/devices", token: token) },
                Example(operation: "DELETE /v1/devices/{device_id}") { api in
                    let spare = try await api.registerDevice(token, name: "spare")
                    return try await api.request("DELETE", "/v1/devices/\(spare)", token: token)
                },
                Example(operation: "DELETE /v1/devices/{device_id}") { try await $0.request("DELETE", "/v1/devices/\(UUID())", token: token) },
                Example(operation: "POST /v1/sync/push") { try await $0.push(token, device: device, ops: [["op_id": newOpID(), "type": "delete", "collection": "notes", "id": "n9"]]) },
                Example(operation: "POST /v1/sync/push") { try await $0.request("POST", "/v1/sync/push", token: token, body: Data("{".utf8)) },
                Example(operation: "GET /v1/sync/jobs/{job_id}") { try await $0.request("GET", "/v1/sync/jobs/\(job)", token: token) },
                Example(operation: "GET /v1/sync/jobs/{job_id}") { try await $0.request("GET", "/v1/sync/jobs/\(UUID())", token: token) },
                Example(operation: "GET /v1/sync/pull") { try await $0.request("GET", "/v1/sync/pull?limit=2", token: token) },
                Example(operation: "GET /v1/sync/pull") { try await $0.request("GET", "/v1/sync/pull?limit=0", token: token) },
                Example(operation: "GET /v1/public") { try await $0.request("GET", "/v1/public?collection=notes&limit=5") },
                Example(operation: "GET /v1/public") { try await $0.request("GET", "/v1/public?limit=1000") },
                Example(operation: "GET /v1/public/{public_id}") { try await $0.request("GET", "/v1/public/\(publicID)") },
                Example(operation: "GET /v1/public/{public_id}") { try await $0.request("GET", "/v1/public/no-such-thing") },
                Example(operation: "GET /v1/admin/dead-letters") { try await $0.request("GET", "/v1/admin/dead-letters?limit=1", token: admin) },
                Example(operation: "GET /v1/admin/dead-letters") { try await $0.request("GET", "/v1/admin/dead-letters", token: token) },
                Example(operation: "GET /v1/admin/dead-letters") { try await $0.request("GET", "/v1/admin/dead-letters?cursor=nope", token: admin) },
                Example(operation: "GET /v1/admin/dead-letters/{job_id}") { try await $0.request("GET", "/v1/admin/dead-letters/\(deadJob)", token: admin) },
                Example(operation: "GET /v1/admin/dead-letters/{job_id}") { try await $0.request("GET", "/v1/admin/dead-letters/\(UUID())", token: admin) },
                Example(operation: "POST /v1/admin/dead-letters/{job_id}/discard") { try await $0.request("POST", "/v1/admin/dead-letters/\(deadJob)/discard", token: admin) },
                Example(operation: "POST /v1/admin/dead-letters/{job_id}/replay") { try await $0.request("POST", "/v1/admin/dead-letters/\(deadJob)/replay", token: admin) },
                Example(operation: "POST /v1/admin/dead-letters/replay") { try await $0.json("POST", "/v1/admin/dead-letters/replay", token: admin, ["user_id": user, "dry_run": true]) },
                Example(operation: "POST /v1/admin/dead-letters/replay") { try await $0.json("POST", "/v1/admin/dead-letters/replay", token: admin, ["dry_run": true]) },
                Example(operation: "GET /v1/admin/audit") { try await $0.request("GET", "/v1/admin/audit?limit=5", token: admin) },
                Example(operation: "GET /v1/rules") { try await $0.request("GET", "/v1/rules", token: token) },
                Example(operation: "GET /v1/rules") { try await $0.request("GET", "/v1/rules", token: token, headers: ["If-None-Match": "*"]) },
                Example(operation: "GET /v1/admin/rules") { try await $0.request("GET", "/v1/admin/rules", token: admin) },
                Example(operation: "GET /v1/admin/rules") { try await $0.request("GET", "/v1/admin/rules", token: token) },
                // Only refused documents here: the rules are the whole deployment's, and this
                // database is every test's (RulesTests apply theirs to a database of their own).
                Example(operation: "PUT /v1/admin/rules") { try await $0.json("PUT", "/v1/admin/rules", token: admin, ["default": "never"]) },
                Example(operation: "PUT /v1/admin/rules") { try await $0.request("PUT", "/v1/admin/rules", token: admin, body: Data("x".utf8), headers: ["Content-Type": "text/plain"]) },
                Example(operation: "GET /v1/admin/rules/history") { try await $0.request("GET", "/v1/admin/rules/history", token: admin) },
                Example(operation: "GET /v1/admin/queues") { try await $0.request("GET", "/v1/admin/queues", token: admin) },
                Example(operation: "GET /v1/admin/job-rates") { try await $0.request("GET", "/v1/admin/job-rates?minutes=5", token: admin) },
                Example(operation: "DELETE /v1/me") { try await $0.request("DELETE", "/v1/me", token: leaver) },
                Example(operation: "DELETE /v1/me") { try await $0.request("DELETE", "/v1/me") },
                Example(operation: "GET /v1/me/deletion") { try await $0.request("GET", "/v1/me/deletion", token: leaver) },
                Example(operation: "GET /v1/me/deletion") { try await $0.request("GET", "/v1/me/deletion", token: token) },
                Example(operation: "POST /v1/spaces") { try await $0.json("POST", "/v1/spaces", token: token, ["name": "Crew"]) },
                Example(operation: "POST /v1/spaces") { try await $0.json("POST", "/v1/spaces", token: token, ["name": ""]) },
                Example(operation: "GET /v1/spaces") { try await $0.request("GET", "/v1/spaces", token: token) },
                Example(operation: "GET /v1/spaces/{space_id}/members") { try await $0.request("GET", "/v1/spaces/\(space)/members", token: token) },
                Example(operation: "GET /v1/spaces/{space_id}/members") { try await $0.request("GET", "/v1/spaces/\(UUID())/members", token: token) },
                Example(operation: "POST /v1/spaces/{space_id}/invitations") { try await $0.json("POST", "/v1/spaces/\(space)/invitations", token: token, ["role": "viewer"]) },
                Example(operation: "POST /v1/spaces/{space_id}/invitations") { try await $0.json("POST", "/v1/spaces/\(space)/invitations", token: token, ["role": "king"]) },
                Example(operation: "GET /v1/spaces/{space_id}/invitations") { try await $0.request("GET", "/v1/spaces/\(space)/invitations", token: token) },
                Example(operation: "GET /v1/spaces/{space_id}/invitations") { try await $0.request("GET", "/v1/spaces/\(UUID())/invitations", token: token) },
                Example(operation: "DELETE /v1/spaces/{space_id}/invitations/{invitation_id}") { api in
                    let spare = try await api.json("POST", "/v1/spaces/\(space)/invitations", token: token, ["role": "viewer"])
                    let id = try #require(spare.json["invitation_id"] as? String)
                    return try await api.request("DELETE", "/v1/spaces/\(space)/invitations/\(id)", token: token)
                },
                Example(operation: "DELETE /v1/spaces/{space_id}/invitations/{invitation_id}") { try await $0.request("DELETE", "/v1/spaces/\(space)/invitations/\(UUID())", token: token) },
                Example(operation: "POST /v1/invitations/{code}/accept") { try await $0.request("POST", "/v1/invitations/\(invitation)/accept", token: guest) },
                Example(operation: "POST /v1/invitations/{code}/accept") { try await $0.request("POST", "/v1/invitations/\(invitation)/accept", token: guest) },
                Example(operation: "PATCH /v1/spaces/{space_id}/members/{user_id}") { try await $0.json("PATCH", "/v1/spaces/\(space)/members/\(guestUser)", token: token, ["role": "editor"]) },
                Example(operation: "PATCH /v1/spaces/{space_id}/members/{user_id}") { try await $0.json("PATCH", "/v1/spaces/\(space)/members/\(user)", token: token, ["role": "viewer"]) },
                Example(operation: "DELETE /v1/spaces/{space_id}/members/{user_id}") { try await $0.request("DELETE", "/v1/spaces/\(space)/members/\(guestUser)", token: guest) },
                Example(operation: "DELETE /v1/spaces/{space_id}/members/{user_id}") { try await $0.request("DELETE", "/v1/spaces/\(space)/members/\(guestUser)", token: guest) },
                Example(operation: "GET /v1/sync/pull") { try await $0.request("GET", "/v1/sync/pull?since=999999", token: token) },
                Example(operation: "POST /v1/admin/service-tokens") { try await $0.json("POST", "/v1/admin/service-tokens", token: admin, ["name": "contract-reader", "read_only": true]) },
                Example(operation: "POST /v1/admin/service-tokens") { try await $0.json("POST", "/v1/admin/service-tokens", token: admin, ["name": "x", "spaces": [UUID().uuidString]]) },
                Example(operation: "GET /v1/admin/service-tokens") { try await $0.request("GET", "/v1/admin/service-tokens", token: admin) },
                Example(operation: "POST /v1/service/spaces/{space_id}/query") { try await $0.json("POST", "/v1/service/spaces/\(space)/query", token: serviceToken, [
                    "collection": "notes", "where": [["field": "by", "op": "=", "value": "backend"]], "order": [["field": "by"]], "limit": 1]) },
                Example(operation: "POST /v1/service/spaces/{space_id}/query") { try await $0.json("POST", "/v1/service/spaces/\(space)/query", token: serviceToken, ["collection": "Notes"]) },
                Example(operation: "POST /v1/service/spaces/{space_id}/query") { try await $0.json("POST", "/v1/service/spaces/\(UUID())/query", token: serviceToken, ["collection": "notes"]) },
                Example(operation: "POST /v1/service/spaces/{space_id}/query") { try await $0.json("POST", "/v1/service/spaces/\(space)/query", token: token, ["collection": "notes"]) },
                Example(operation: "POST /v1/service/spaces/{space_id}/push") { try await $0.json("POST", "/v1/service/spaces/\(space)/push", token: serviceToken, ["ops": [
                    ["op_id": newOpID(), "type": "patch", "collection": "notes", "id": "s1", "data": ["seen": true]]]]) },
                Example(operation: "POST /v1/service/spaces/{space_id}/push") { try await $0.json("POST", "/v1/service/spaces/\(space)/push", token: serviceToken, ["device_id": device, "ops": []]) },
                Example(operation: "GET /v1/service/spaces/{space_id}/jobs/{job_id}") { try await $0.request("GET", "/v1/service/spaces/\(space)/jobs/\(serviceJob)", token: serviceToken) },
                Example(operation: "GET /v1/service/spaces/{space_id}/jobs/{job_id}") { try await $0.request("GET", "/v1/service/spaces/\(space)/jobs/\(job)", token: serviceToken) },
                Example(operation: "GET /v1/service/spaces/{space_id}/members") { try await $0.request("GET", "/v1/service/spaces/\(space)/members", token: serviceToken) },
                Example(operation: "PUT /v1/service/spaces/{space_id}/members/{user_id}") { try await $0.json("PUT", "/v1/service/spaces/\(space)/members/contract-extra", token: serviceToken, ["role": "viewer"]) },
                Example(operation: "PUT /v1/service/spaces/{space_id}/members/{user_id}") { try await $0.json("PUT", "/v1/service/spaces/\(space)/members/\(user)", token: serviceToken, ["role": "editor"]) },
                Example(operation: "DELETE /v1/service/spaces/{space_id}/members/{user_id}") { try await $0.request("DELETE", "/v1/service/spaces/\(space)/members/contract-extra", token: serviceToken) },
                Example(operation: "DELETE /v1/service/spaces/{space_id}/members/{user_id}") { try await $0.request("DELETE", "/v1/service/spaces/\(space)/members/nobody", token: serviceToken) },
                Example(operation: "POST /v1/service/spaces") { try await $0.json("POST", "/v1/service/spaces", token: everywhere, ["name": "Made by the backend", "owner": user]) },
                Example(operation: "POST /v1/service/spaces") { try await $0.json("POST", "/v1/service/spaces", token: serviceToken, ["name": "Not allowed", "owner": user]) },
                Example(operation: "POST /v1/devices/{device_id}/set-aside") { try await $0.json("POST", "/v1/devices/\(device)/set-aside", token: token, [
                    "ops": [["op_id": newOpID(), "reason": "rule", "space_id": space, "collection": "notes", "id": "s1", "job_id": job]]]) },
                Example(operation: "POST /v1/devices/{device_id}/set-aside") { try await $0.json("POST", "/v1/devices/\(device)/set-aside", token: token, ["ops": [["op_id": "x", "reason": "rule"]]]) },
                Example(operation: "POST /v1/devices/{device_id}/set-aside") { try await $0.json("POST", "/v1/devices/\(UUID())/set-aside", token: token, ["ops": []]) },
                Example(operation: "GET /v1/admin/support/user") { try await $0.request("GET", "/v1/admin/support/user?user_id=\(user)", token: admin) },
                Example(operation: "GET /v1/admin/support/user") { try await $0.request("GET", "/v1/admin/support/user?user_id=nobody-\(UUID())", token: admin) },
                Example(operation: "GET /v1/admin/support/user") { try await $0.request("GET", "/v1/admin/support/user?user_id=\(user)", token: token) },
                Example(operation: "GET /v1/admin/support/devices/{device_id}") { try await $0.request("GET", "/v1/admin/support/devices/\(device)", token: admin) },
                Example(operation: "GET /v1/admin/support/devices/{device_id}") { try await $0.request("GET", "/v1/admin/support/devices/\(UUID())", token: admin) },
                Example(operation: "GET /v1/admin/support/jobs/{job}") { try await $0.request("GET", "/v1/admin/support/jobs/\(job)", token: admin) },
                Example(operation: "GET /v1/admin/support/jobs/{job}") { try await $0.request("GET", "/v1/admin/support/jobs/0af7651916cd43dd8448eb211c80319c", token: admin) },
                Example(operation: "GET /v1/admin/support/spaces/{space_id}") { try await $0.request("GET", "/v1/admin/support/spaces/\(space)", token: admin) },
                Example(operation: "GET /v1/admin/support/spaces/{space_id}") { try await $0.request("GET", "/v1/admin/support/spaces/\(UUID())", token: admin) },
                Example(operation: "POST /v1/admin/support/spaces/{space_id}/records") { try await $0.json("POST", "/v1/admin/support/spaces/\(space)/records", token: support, ["collection": "notes", "limit": 1]) },
                Example(operation: "POST /v1/admin/support/spaces/{space_id}/records") { try await $0.json("POST", "/v1/admin/support/spaces/\(space)/records", token: support, ["collection": "Notes"]) },
                Example(operation: "POST /v1/admin/support/spaces/{space_id}/records") { try await $0.json("POST", "/v1/admin/support/spaces/\(space)/records", token: admin, ["collection": "notes"]) },
                Example(operation: "GET /v1/admin/support/spaces/{space_id}/record") { try await $0.request("GET", "/v1/admin/support/spaces/\(space)/record?collection=notes&id=s1", token: support) },
                Example(operation: "GET /v1/admin/support/spaces/{space_id}/record") { try await $0.request("GET", "/v1/admin/support/spaces/\(space)/record?collection=notes&id=none", token: support) },
                Example(operation: "GET /v1/admin/support/spaces/{space_id}/record") { try await $0.request("GET", "/v1/admin/support/spaces/\(space)/record?collection=notes", token: support) },
                Example(operation: "GET /v1/admin/support/why") { try await $0.request("GET", "/v1/admin/support/why?device_id=\(device)&space_id=\(space)&collection=notes&id=s1", token: admin) },
                Example(operation: "GET /v1/admin/support/why") { try await $0.request("GET", "/v1/admin/support/why?device_id=nope&space_id=\(space)&collection=notes&id=s1", token: admin) },
                Example(operation: "GET /v1/admin/feeds") { try await $0.request("GET", "/v1/admin/feeds", token: admin) },
                Example(operation: "POST /v1/admin/feeds") { try await $0.json("POST", "/v1/admin/feeds", token: admin, ["url": "http://127.0.0.1/in"]) },
                Example(operation: "POST /v1/admin/feeds/{feed_id}/replay") { try await $0.json("POST", "/v1/admin/feeds/\(feedID)/replay", token: admin, ["from_version": 0]) },
                Example(operation: "POST /v1/admin/feeds/{feed_id}/replay") { try await $0.json("POST", "/v1/admin/feeds/\(UUID())/replay", token: admin, [:]) },
                Example(operation: "DELETE /v1/admin/feeds/{feed_id}") { try await $0.request("DELETE", "/v1/admin/feeds/\(feedID)", token: admin) },
                Example(operation: "DELETE /v1/admin/feeds/{feed_id}") { try await $0.request("DELETE", "/v1/admin/feeds/\(feedID)", token: admin) },
                Example(operation: "DELETE /v1/admin/service-tokens/{token_id}") { try await $0.request("DELETE", "/v1/admin/service-tokens/\(serviceTokenID)", token: admin) },
                Example(operation: "DELETE /v1/admin/service-tokens/{token_id}") { try await $0.request("DELETE", "/v1/admin/service-tokens/\(UUID())", token: admin) },
                Example(operation: "DELETE /v1/spaces/{space_id}") { try await $0.request("DELETE", "/v1/spaces/\(space)", token: guest) },
                Example(operation: "DELETE /v1/spaces/{space_id}") { try await $0.request("DELETE", "/v1/spaces/\(space)", token: token) },
                Example(operation: "GET /v1/sync/pull") { try await $0.request("GET", "/v1/sync/pull?space_id=\(UUID())", token: token) },
                Example(operation: "GET /admin") { try await $0.request("GET", "/admin") },
                Example(operation: "GET /admin/support") { try await $0.request("GET", "/admin/support") },
                Example(operation: "GET /healthz") { try await $0.request("GET", "/healthz") },
                Example(operation: "GET /readyz") { try await $0.request("GET", "/readyz") },
                Example(operation: "GET /metrics") { try await $0.request("GET", "/metrics") },
                Example(operation: "GET /openapi.yaml") { try await $0.request("GET", "/openapi.yaml") },
            ]
            #expect(Set(examples.map(\.operation)) == Set(document.operations), "every documented operation needs an example, and only those")
            for example in examples {
                document.check(example.operation, try await example.run(api))
            }
            // A route the document does not list does not exist.
            #expect(try await api.request("GET", "/v1/nothing-here", token: token).status == 404)
        }
    }

    @Test func badInputGetsAClearAnswerAndCreatesNoJob() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let document = try Document(text: try String(contentsOfFile: Self.documentPath, encoding: .utf8))
            let user = "bad-\(UUID().uuidString.prefix(6))"
            let token = await E2E.token(user)
            let device = try await api.registerDevice(token)
            let revoked = try await api.registerDevice(token, name: "old")
            #expect(try await api.request("DELETE", "/v1/devices/\(revoked)", token: token).status == 204)
            func op(_ extra: [String: Any]) -> [String: Any] {
                ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": "n1", "data": ["a": 1]].merging(extra) { $1 }
            }
            func raw(_ text: String, token: String? = token) async throws -> HTTPResult {
                try await api.request("POST", "/v1/sync/push", token: token, body: Data(text.utf8))
            }
            let signer = try await TokenMinter(secret: E2E.secret)
            // Past the 60 s leeway.
            let expired = try await signer.sign(Claims(sub: user, exp: Int64(Date().timeIntervalSince1970) - 120))
            let algNone = Data(#"{"alg":"none"}"#.utf8).base64EncodedString().replacingOccurrences(of: "=", with: "")
                + "." + Data(#"{"sub":"\#(user)","exp":9999999999}"#.utf8).base64EncodedString().replacingOccurrences(of: "=", with: "") + "."
            let otherKey = try await TokenMinter(secret: "a-different-secret-a-different-secret").sign(Claims(sub: user, exp: 9_999_999_999))

            let cases: [(String, Int, String, () async throws -> HTTPResult)] = [
                ("malformed JSON", 400, "invalid_request", { try await raw("{\"device_id\":") }),
                ("wrong types", 422, "invalid_request", { try await raw(#"{"device_id":"\#(device)","ops":"many"}"#) }),
                ("oversized body", 413, "payload_too_large", { try await raw(String(repeating: " ", count: 1_048_577)) }),
                ("too many ops", 422, "invalid_request", { try await api.push(token, device: device, ops: (0..<501).map { _ in op([:]) }) }),
                ("bad collection", 422, "invalid_request", { try await api.push(token, device: device, ops: [op(["collection": "Bad Name"])]) }),
                ("unknown op type", 422, "invalid_request", { try await api.push(token, device: device, ops: [op(["type": "merge"])]) }),
                ("bad hlc", 422, "invalid_request", { try await api.push(token, device: device, ops: [op(["hlc": "soon"])]) }),
                ("bad op_id", 422, "invalid_request", { try await api.push(token, device: device, ops: [op(["op_id": "1"])]) }),
                ("empty patch", 422, "invalid_request", { try await api.push(token, device: device, ops: [op(["type": "patch", "data": [String: Any]()])]) }),
                ("unknown device", 404, "not_found", { try await api.push(token, device: UUID().uuidString, ops: [op([:])]) }),
                ("foreign device", 404, "not_found", { try await api.push(await E2E.token("someone-else"), device: device, ops: [op([:])]) }),
                ("revoked device", 403, "forbidden", { try await api.push(token, device: revoked, ops: [op([:])]) }),
                ("no token", 401, "unauthorized", { try await api.push("", device: device, ops: [op([:])]) }),
                ("expired token", 401, "unauthorized", { try await api.push(expired, device: device, ops: [op([:])]) }),
                ("alg none", 401, "unauthorized", { try await api.push(algNone, device: device, ops: [op([:])]) }),
                ("wrong key", 401, "unauthorized", { try await api.push(otherKey, device: device, ops: [op([:])]) }),
                ("reused idempotency key", 422, "invalid_request", {
                    _ = try await api.push(token, device: device, ops: [op([:])], headers: ["Idempotency-Key": "k"])
                    return try await api.push(token, device: device, ops: [op([:])], headers: ["Idempotency-Key": "k"])
                }),
            ]
            for (name, status, code, call) in cases {
                let result = try await call()
                #expect(result.status == status, "\(name): \(result.status) \(result.text)")
                #expect(result.json["code"] as? String == code, "\(name): \(result.text)")
                #expect(result.header("Content-Type") == "application/problem+json", "\(name)")
                if status == 422 { #expect((result.json["detail"] as? String)?.isEmpty == false) }
                document.check("POST /v1/sync/push", result)
            }
            // A 401 says why in its `token` member: a client tells "sign in again" from
            // anything else without reading the detail.
            for (credential, reason) in [("", "missing"), (expired, "expired"), (algNone, "invalid"), (otherKey, "invalid")] {
                let result = try await api.push(credential, device: device, ops: [op([:])])
                #expect(result.json["token"] as? String == reason, "\(reason): \(result.text)")
                #expect(result.header("WWW-Authenticate") == (reason == "missing" ? "Bearer" : #"Bearer error="invalid_token""#), "\(reason)")
            }
            // The op refused is named by members a client reads, not in the detail's words.
            let refused = try await api.push(token, device: device, ops: [op([:]), op(["id": "bad id"])])
            #expect(refused.json["op_index"] as? Int == 1 && refused.json["pointer"] as? String == "/ops/1/id", "\(refused.text)")
            let tooMany = try await api.push(token, device: device, ops: (0...Limits.maxOpsPerPush).map { _ in op([:]) })
            #expect(tooMany.status == 422 && tooMany.json["limit"] as? Int == Limits.maxOpsPerPush
                && tooMany.json["pointer"] as? String == "/ops", "\(tooMany.text)")

            // Only the one push with the Idempotency-Key made a job; nothing else did.
            let pool = PGPool(url: E2E.databaseURL!, size: 1, logger: E2E.logger)
            let count = try await pool.value("SELECT count(*) FROM jobs WHERE user_id = \(user)")
            await pool.shutdown()
            #expect(count == 1)
            // The gateway is still serving.
            #expect(try await api.request("GET", "/healthz").status == 200)
        }
    }
}
