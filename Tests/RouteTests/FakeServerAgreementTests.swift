import Foundation
import SynclineTesting
import Testing
import TestSupport

/// Apps test against the fake servers (`SynclineTesting`, and SynclineWeb's
/// `@syncline/web/testing`): for every request below the fake answers with the gateway's
/// status and problem `code`, so what an app's test learns from a fake holds against
/// Syncline. The gateway's answers are kept in `Tests/Conformance/refusals.json`, which
/// the web fake's Node test reads; a stale file fails here, and `UPDATE_VECTORS=1` rewrites
/// it. (Pushes are held to the gateway in `PushAnswerTests`, through the conformance
/// vectors.)
@Suite(.timeLimit(.minutes(1)), .enabled(if: InProcessGateway.enabled, "needs DATABASE_URL and AMQP_URL"))
struct FakeServerAgreementTests {
    /// One request, made for a server given its registered device and a space of the user's.
    struct Request: CustomStringConvertible, Sendable {
        let method: String
        let path: @Sendable (_ device: String) -> String
        var body: (@Sendable (_ device: String) -> String)?
        var authorized = true

        var description: String { "\(method) \(path("DEVICE"))\(body.map { " \($0("DEVICE"))" } ?? "")" }
    }

    static let elsewhere = "7d3f0c2e-5b1a-4e6f-8a90-0000000000aa"
    static let sha = String(repeating: "0", count: 64)

    static let requests: [Request] = [
        // Devices.
        Request(method: "POST", path: { _ in "/v1/devices" }, body: { _ in "{" }),
        Request(method: "POST", path: { _ in "/v1/devices" }, body: { _ in #"{"name":7,"platform":"ios"}"# }),
        Request(method: "POST", path: { _ in "/v1/devices" }, body: { _ in #"{"name":"a\u0000b","platform":"ios"}"# }),
        Request(method: "POST", path: { _ in "/v1/devices" }, body: { _ in #"{"name":"phone","platform":"ios","push_url":"ftp://x"}"# }),
        Request(method: "POST", path: { _ in "/v1/devices/\(elsewhere)/set-aside" }, body: { _ in #"{"op_ids":[]}"# }),
        Request(method: "POST", path: { _ in "/v1/devices/\(elsewhere)/set-aside" }, body: { _ in #"{"ops":[]}"# }),
        Request(method: "POST", path: { "/v1/devices/\($0)/set-aside" }, body: { _ in "{" }),
        // Pulls.
        Request(method: "GET", path: { _ in "/v1/sync/pull?since=-1" }),
        Request(method: "GET", path: { _ in "/v1/sync/pull?since=abc" }),
        Request(method: "GET", path: { _ in "/v1/sync/pull?limit=0" }),
        Request(method: "GET", path: { _ in "/v1/sync/pull?limit=100000" }),
        Request(method: "GET", path: { _ in "/v1/sync/pull?limit=5000" }),
        Request(method: "GET", path: { _ in "/v1/sync/pull?min_cursor=-1" }),
        Request(method: "GET", path: { _ in "/v1/sync/pull?collections=notes,Not%20One" }),
        Request(method: "GET", path: { _ in "/v1/sync/pull?collections=notes" }),
        Request(method: "GET", path: { _ in "/v1/sync/pull?form=other" }),
        Request(method: "GET", path: { _ in "/v1/sync/pull?form=compact" }),
        Request(method: "GET", path: { "/v1/sync/pull?device_id=\($0)" }),
        Request(method: "GET", path: { _ in "/v1/sync/pull?device_id=not-a-device" }),
        Request(method: "GET", path: { _ in "/v1/sync/pull?since=0&space_id=\(elsewhere)&limit=0" }),
        Request(method: "GET", path: { _ in "/v1/sync/pull?space_id=not-a-space" }),
        Request(method: "GET", path: { _ in "/v1/sync/pull?space_id=\(elsewhere)" }),
        Request(method: "GET", path: { _ in "/v1/sync/pull" }, authorized: false),
        // Jobs.
        Request(method: "GET", path: { _ in "/v1/sync/jobs/not-a-job" }),
        Request(method: "GET", path: { _ in "/v1/sync/jobs/\(elsewhere)" }),
        // Spaces, members, invitations.
        Request(method: "POST", path: { _ in "/v1/spaces" }, body: { _ in "{" }),
        Request(method: "POST", path: { _ in "/v1/spaces" }, body: { _ in #"{"name":""}"# }),
        Request(method: "DELETE", path: { _ in "/v1/spaces/\(elsewhere)" }),
        Request(method: "GET", path: { _ in "/v1/spaces/\(elsewhere)/members" }),
        Request(method: "POST", path: { _ in "/v1/spaces/\(elsewhere)/invitations" }, body: { _ in #"{"role":"editor"}"# }),
        Request(method: "POST", path: { _ in "/v1/invitations/\(elsewhere)/accept" }, body: { _ in "{}" }),
        Request(method: "GET", path: { _ in "/v1/spaces" }, authorized: false),
        // Files.
        Request(method: "GET", path: { _ in "/v1/blobs/not-a-hash" }),
        Request(method: "GET", path: { _ in "/v1/blobs/\(sha)" }),
        Request(method: "PUT", path: { _ in "/v1/blobs/not-a-hash" }, body: { _ in "bytes" }),
    ]

    /// Status and problem code: what must agree.
    struct Shape: Equatable, Sendable, CustomStringConvertible {
        let status: Int
        let code: String?

        init(_ result: HTTPResult) {
            status = result.status
            code = result.json["code"] as? String
        }

        var description: String { "\(status) \(code ?? "-")" }
    }

    static let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Conformance/refusals.json").path

    /// The file's text: each request (`{device}` standing for the caller's device) with the
    /// gateway's status and code.
    static func file(_ answers: [(Request, Shape)]) throws -> String {
        let entries: [[String: Any]] = answers.map { request, shape in
            [
                "method": request.method, "path": request.path("{device}"), "body": request.body.map { $0("{device}") } ?? NSNull(),
                "authorized": request.authorized, "status": shape.status, "code": shape.code ?? NSNull(),
            ]
        }
        let data = try JSONSerialization.data(withJSONObject: ["refusals": entries], options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
        return String(decoding: data, as: UTF8.self) + "\n"
    }

    static func send(_ api: APIClient, _ request: Request, token: String, device: String) async throws -> HTTPResult {
        try await api.request(
            request.method, request.path(device), token: request.authorized ? token : nil,
            body: request.body.map { Data($0(device).utf8) })
    }

    @Test func theFakeServerRefusesAsTheGatewayDoes() async throws {
        let fake = try await FakeSyncServer.start()
        try await withCleanup {
            let fakeAPI = APIClient(base: fake.url.absoluteString)
            let fakeToken = try await fake.configuration(user: "alice").tokenProvider(false)
            let fakeDevice = try await fakeAPI.registerDevice(fakeToken)
            let answers = try await InProcessGateway.with { api in
                let token = await Tokens.make("agree-\(UUID().uuidString.prefix(6))")
                let device = try await api.registerDevice(token)
                var answers: [(Request, Shape)] = []
                for request in Self.requests {
                    let gateway = Shape(try await Self.send(api, request, token: token, device: device))
                    let answered = Shape(try await Self.send(fakeAPI, request, token: fakeToken, device: fakeDevice))
                    #expect(answered == gateway, "\(request): the gateway answers \(gateway), the fake \(answered)")
                    #expect(gateway.status < 500, "\(request): the gateway answers \(gateway)")
                    answers.append((request, gateway))
                }
                return answers
            }
            let text = try Self.file(answers)
            if ProcessInfo.processInfo.environment["UPDATE_VECTORS"] == "1" {
                try text.write(toFile: Self.path, atomically: true, encoding: .utf8)
            }
            let stored = try? String(contentsOfFile: Self.path, encoding: .utf8)
            #expect(stored == text, "Tests/Conformance/refusals.json is stale: run UPDATE_VECTORS=1 swift test --filter FakeServerAgreementTests")
        } cleanup: {
            try? await fake.shutdown()
        }
    }
}
