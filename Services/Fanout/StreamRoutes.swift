import Auth
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOCore
import PQBridge
import Persistence
import ServiceSupport
import SyncModels

/// `GET /v1/stream?device_id=…`: Server-Sent Events for `Accept: text/event-stream`, a
/// WebSocket for an upgrade request. Refusals are problem+json: 401 (token), 403 (revoked
/// device), 404 (unknown or foreign device). A refused WebSocket upgrade falls through to
/// the HTTP route, which answers with the same problem.
struct StreamRoutes: Sendable {
    let auth: Authenticator
    let devices: DeviceStore
    let pulls: PullStore
    let hub: Hub
    let limiter: RateLimiter

    /// The caller and the device the stream is for, or the refusal.
    func authorize(
        _ request: Request, context: some RequestContext, countsAgainstLimit: Bool = true
    ) async throws -> (user: String, deviceID: String) {
        let claims = try await auth.user(request, context: context)
        if countsAgainstLimit { try limiter.check(claims.sub, limit: "streams") }
        guard let text = request.uri.queryParameters["device_id"].map(String.init), let deviceID = Names.canonicalUUID(text) else {
            throw APIError.badRequest("device_id must be the id of one of your devices.")
        }
        switch try await devices.state(user: claims.sub, deviceID: deviceID) {
        case .notFound: throw APIError.notFound("No such device.")
        case .revoked: throw APIError.forbidden("This device was revoked.")
        case .active:
            try await devices.markSeen(deviceIDs: [deviceID])
            return (claims.sub, deviceID)
        }
    }

    func registerHTTP(on router: Router<BasicWebSocketRequestContext>) {
        router.get("/v1/stream") { request, context in try await sse(request, context: context) }
    }

    func registerWebSocket(on router: Router<BasicWebSocketRequestContext>) {
        router.ws("/v1/stream") { request, context in
            // Anything refused here is answered by the HTTP route instead.
            guard (try? await authorize(request, context: context)) != nil else { return .dontUpgrade }
            return .upgrade([:])
        } onUpgrade: { inbound, outbound, context in
            guard let (user, deviceID) = try? await authorize(context.request, context: context.requestContext, countsAgainstLimit: false) else { return }
            let cursor = try await pulls.currentCursor(user: user)
            let (id, messages) = try await hub.subscribe(user: user, deviceID: deviceID)
            defer { hub.unsubscribe(user: user, id: id) }
            try await outbound.write(.text(StreamMessage.hello(cursor: cursor).json))
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for await message in messages { try await outbound.write(.text(message.json)) }
                }
                group.addTask {
                    // Read until the client closes; what it sends is ignored.
                    for try await _ in inbound {}
                }
                _ = try await group.next()
                group.cancelAll()
            }
        }
    }

    func sse(_ request: Request, context: BasicWebSocketRequestContext) async throws -> Response {
        let (user, deviceID) = try await authorize(request, context: context)
        guard request.headers[.accept]?.contains("text/event-stream") == true else {
            throw APIError.badRequest("Ask for text/event-stream, or upgrade to a WebSocket.")
        }
        let cursor = try await pulls.currentCursor(user: user)
        let (id, messages) = try await hub.subscribe(user: user, deviceID: deviceID)
        let hub = self.hub
        var headers = HTTPFields()
        headers[.contentType] = "text/event-stream"
        headers[.cacheControl] = "no-cache"
        headers[HTTPField.Name("X-Accel-Buffering")!] = "no"
        return Response(status: .ok, headers: headers, body: ResponseBody { writer in
            defer { hub.unsubscribe(user: user, id: id) }
            try await writer.write(ByteBuffer(string: Self.event(.hello(cursor: cursor))))
            for await message in messages {
                try await writer.write(ByteBuffer(string: Self.event(message)))
            }
            try await writer.finish(nil)
        })
    }

    static func event(_ message: StreamMessage) -> String { "data: \(message.json)\n\n" }
}
