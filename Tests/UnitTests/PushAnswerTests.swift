import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import SyncModels
@testable import SynclineClient
import SynclineTesting
import Testing

/// The fake server apps test against answers a push as the gateway does: for each
/// situation both can be put in, its answer comes to the same `PushAnswer` as the gateway's
/// (the conformance vectors' `push_answers`, made by the gateway's own builders) — the same
/// action, op, rules version, file and whether it says when to retry; only the texts for
/// people and the job's id may differ.
struct PushAnswerTests {
    static let device = "6f1c2a4e-0b1d-4c3e-9f00-00000000000a"

    /// What must agree between two answers to one situation.
    static func shape(_ answer: PushAnswer) -> JSONValue {
        guard var members = answer.json.objectValue else { return answer.json }
        members["detail"] = nil
        members["job_id"] = nil
        if let reason = members["reason"]?.stringValue, !reason.hasPrefix("rule:") { members["reason"] = nil }
        if let retry = members["retry_after"] { members["retry_after"] = .bool(retry != .null) }
        return .object(members)
    }

    static func gatewayAnswer(_ name: String) throws -> PushAnswer {
        try #require(ConformanceVectors.pushAnswerCases.first { $0.name == name }, "no vector \(name)").decided
    }

    /// One request to the fake server, read as a client reads a push's answer.
    static func send(
        _ server: FakeSyncServer, token: String, _ method: String, _ path: String, body: String, key: String? = nil,
        namesSpace: Bool = false, batchOps: Int = 3
    ) async throws -> (PushAnswer, JSONValue?) {
        var request = URLRequest(url: server.url.appendingPathComponent(path))
        request.httpMethod = method
        request.httpBody = Data(body.utf8)
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        if let key { request.setValue(key, forHTTPHeaderField: "Idempotency-Key") }
        let (data, response) = try await URLSession.shared.data(for: request)
        let http = try #require(response as? HTTPURLResponse)
        let headers = http.value(forHTTPHeaderField: "Retry-After").map { ["Retry-After": $0] } ?? [:]
        let received = ServerAPI.Answer(status: http.statusCode, headers: headers, body: data)
        return (received.pushAnswer(namesSpace: namesSpace, batchOps: batchOps), received.json)
    }

    static func push(device: String, space: String? = nil, ops: [String]) -> String {
        #"{"device_id":"\#(device)"\#(space.map { #","space_id":"\#($0)""# } ?? ""),"ops":[\#(ops.joined(separator: ","))]}"#
    }

    static func upsert(_ id: String, data: String = #"{"title":"a"}"#) -> String {
        #"{"op_id":"\#(UUID().uuidString.lowercased())","type":"upsert","collection":"todos","id":"\#(id)","data":\#(data)}"#
    }

    @Test func theFakeServerAnswersPushesAsTheGatewayDoes() async throws {
        let server = try await FakeSyncServer.start()
        let configuration = try server.configuration(user: "alice")
        let token = try await configuration.tokenProvider(false)
        let (registered, json) = try await Self.send(server, token: token, "POST", "/v1/devices", body: #"{"name":"t","platform":"test"}"#)
        _ = registered
        let device = try #require(json?.objectValue?["device_id"]?.stringValue)
        let three = [Self.upsert("t1"), Self.upsert("t2"), Self.upsert("t3")]
        func expectSame(_ name: String, _ fake: (PushAnswer, JSONValue?)) throws {
            #expect(Self.shape(fake.0) == Self.shape(try Self.gatewayAnswer(name)), "\(name): the fake answered \(fake.1.map(JSONWriter.string) ?? "?")")
        }

        try expectSame("accepted", try await Self.send(server, token: token, "POST", "/v1/sync/push", body: Self.push(device: device, ops: three)))
        let badOp = #"{"device_id":"\#(device)","ops":[{"op_id":"6f1c2a4e-0b1d-4c3e-9f00-000000000001","type":"upsert","collection":"todos","id":"t1","data":{"a":1}},{"op_id":"nope","type":"upsert","collection":"todos","id":"t2","data":{}}]}"#
        try expectSame("an op the validation refuses", try await Self.send(server, token: token, "POST", "/v1/sync/push", body: badOp))
        try expectSame("a body that is not JSON", try await Self.send(server, token: token, "POST", "/v1/sync/push", body: "{"))
        _ = try await Self.send(server, token: token, "POST", "/v1/sync/push", body: Self.push(device: device, ops: three), key: "k1")
        try expectSame("an Idempotency-Key used with another body", try await Self.send(
            server, token: token, "POST", "/v1/sync/push", body: Self.push(device: device, ops: [Self.upsert("t9")]), key: "k1"))
        let sha256 = String(repeating: "ab", count: 32)
        let withFile = Self.upsert("t3", data: #"{"photo":{"$blob":{"sha256":"\#(sha256)","size":3,"content_type":"image/png"}}}"#)
        try expectSame("a file the space does not hold", try await Self.send(
            server, token: token, "POST", "/v1/sync/push", body: Self.push(device: device, ops: [Self.upsert("t1"), Self.upsert("t2"), withFile])))
        try expectSame("no such device", try await Self.send(
            server, token: token, "POST", "/v1/sync/push", body: Self.push(device: Self.device, ops: three)))
        try expectSame("no such space", try await Self.send(
            server, token: token, "POST", "/v1/sync/push", body: Self.push(device: device, space: UUID().uuidString.lowercased(), ops: three),
            namesSpace: true))
        let space = server.createSpace(name: "family", owner: "bob")
        try server.addMember("alice", to: space, as: .viewer)
        try expectSame("a viewer pushing to a shared space", try await Self.send(
            server, token: token, "POST", "/v1/sync/push", body: Self.push(device: device, space: space, ops: three), namesSpace: true))
        server.rateLimit(next: 1, retryAfter: 3)
        try expectSame("rate limited", try await Self.send(server, token: token, "POST", "/v1/sync/push", body: Self.push(device: device, ops: three)))
        server.setUnavailable(true)
        try expectSame("the database out", try await Self.send(server, token: token, "POST", "/v1/sync/push", body: Self.push(device: device, ops: three)))
        server.setUnavailable(false)
        try await server.shutdown()
    }
}
