import Auth
import Foundation
import HTTPSupport
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOWebSocket
import PQBridge
import Persistence
import ServiceSupport
import SyncModels
import Tracing

/// `GET /v1/stream?device_id=…[&space_id=…]`: Server-Sent Events for `Accept:
/// text/event-stream`, a WebSocket for an upgrade request; the pokes of every space of the
/// user, or of `space_id` alone. Refusals are problem+json: 400 (malformed ids), 401
/// (token), 403 (revoked device), 404 (unknown or foreign device, a space the user is not
/// in), 429 (too many new streams, or too many open ones). A refused WebSocket upgrade goes on as HTTP to the
/// same route, which answers with the problem.
///
/// The stream subscribes before it reads the cursors its `hello` carries, so a change
/// committed in between is either counted in `hello` or poked after it.
struct StreamRoutes: Sendable {
    let auth: Authenticator
    let devices: DeviceStore
    let pulls: PullStore
    let spaces: SpaceStore
    let hub: Hub
    let limiter: RateLimiter

    /// Whom a stream is for.
    struct Listener: Sendable {
        let user: UserID
        let deviceID: String
        /// The one space the stream is narrowed to; nil: every space of the user.
        let space: String?
    }

    /// The caller, the device and the space the stream is for, or the refusal.
    func authorize(_ request: Request, context: some RequestContext) async throws -> Listener {
        let claims = try await auth.user(request, context: context)
        try limiter.check(claims.sub, limit: "streams")
        // Checked here too, so a WebSocket over the cap is refused before its upgrade;
        // `Hub.subscribe` enforces it.
        guard hub.admits(user: claims.user) else { throw hub.tooManyStreams() }
        guard let device = request.uri.queryParameters["device_id"].flatMap(DeviceID.init) else {
            throw APIError.badRequest("device_id must be the id of one of your devices.")
        }
        let space = try request.spaceParameter()
        switch try await devices.state(user: claims.user, device: device) {
        case .notFound: throw APIError.notFound("No such device.")
        case .revoked: throw APIError.forbidden("This device was revoked.")
        case .active: break
        }
        if let space, try await spaces.role(user: claims.user, space: space) == nil { throw APIError.notFound("No such space.") }
        try await devices.markSeen(devices: [device])
        return Listener(user: claims.user, deviceID: device.description, space: space?.description)
    }

    /// Subscribes the listener, then reads where their stream starts; a space they left
    /// in between is refused as unknown.
    func open(_ listener: Listener) async throws -> (id: UUID, messages: AsyncStream<StreamMessage>, hello: StreamMessage) {
        let (id, messages) = try await hub.subscribe(user: listener.user, deviceID: listener.deviceID, space: listener.space)
        do {
            guard let start = try await pulls.streamStart(user: listener.user, space: listener.space) else {
                throw APIError.notFound("No such space.")
            }
            return (id, messages, .hello(start))
        } catch {
            hub.unsubscribe(user: listener.user, id: id)
            throw error
        }
    }

    func registerHTTP(on router: Router<BasicRequestContext>) {
        router.get("/v1/stream") { request, context in try await sse(request, context: context) }
    }

    /// An upgrade request: the WebSocket stream of a device that may stream, or the same
    /// refusal a Server-Sent Events request would get. Logged and traced like the routes
    /// the middleware sees: one line when the refusal is sent or the stream ends.
    func webSocketDecision(_ request: Request, channel: any Channel, logger: Logger, slow: Duration) async -> StreamServerChannel.Decision {
        let telemetry = RequestTelemetry(request: request.head, logger: logger, slow: slow)
        let route = request.uri.path == "/v1/stream" ? "/v1/stream" : nil
        return await ServiceContext.withValue(telemetry.context) {
            guard route != nil else {
                telemetry.finish(route: nil, status: .notFound, bytes: 0)
                return .refuse(.notFound("No WebSocket is served here."))
            }
            guard request.method == .get else {
                telemetry.finish(route: route, status: .methodNotAllowed, bytes: 0)
                return .refuse(.methodNotAllowed(allowed: ["GET", "HEAD"]))
            }
            let context = BasicRequestContext(source: .init(channel: channel, logger: logger))
            do {
                let listener = try await authorize(request, context: context)
                return .upgrade { frames in
                    await stream(to: frames, for: listener, logger: logger)
                    telemetry.finish(route: route, status: .switchingProtocols, bytes: 0)
                }
            } catch {
                let refusal = APIError.problem(for: error, logger: logger)
                telemetry.finish(route: route, status: refusal.status, bytes: 0)
                return .refuse(refusal)
            }
        }
    }

    /// One WebSocket stream: `hello`, then the hub's messages as text frames, until the hub
    /// ends it (revocation, shutdown) or the client closes. Pings are answered; anything
    /// else the client sends is ignored.
    func stream(to frames: NIOAsyncChannel<WebSocketFrame, WebSocketFrame>, for listener: Listener, logger: Logger) async {
        do {
            try await frames.executeThenClose { inbound, outbound in
                let (id, messages, hello) = try await open(listener)
                defer { hub.unsubscribe(user: listener.user, id: id) }
                let (outgoing, send) = AsyncStream.makeStream(of: WebSocketFrame.self)
                send.yield(Self.text(hello.json))
                try await withThrowingTaskGroup(of: Bool.self) { group in
                    group.addTask {
                        for await frame in outgoing { try await outbound.write(frame) }
                        return true
                    }
                    group.addTask {
                        for await message in messages { send.yield(Self.text(message.json)) }
                        var code = ByteBuffer()
                        code.write(webSocketErrorCode: .normalClosure)
                        send.yield(WebSocketFrame(fin: true, opcode: .connectionClose, data: code))
                        send.finish()
                        return false
                    }
                    group.addTask {
                        for try await frame in inbound {
                            switch frame.opcode {
                            case .ping:
                                send.yield(WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData))
                            case .connectionClose:
                                send.yield(WebSocketFrame(fin: true, opcode: .connectionClose, data: frame.unmaskedData))
                                send.finish()
                                return false
                            default:
                                continue
                            }
                        }
                        send.finish()
                        return false
                    }
                    // The connection is done once the last frame is written.
                    while let writerDone = try await group.next(), !writerDone {}
                    group.cancelAll()
                }
            }
        } catch {
            logger.debug("WebSocket stream ended", metadata: ["error": "\(error)"])
        }
    }

    static func text(_ json: String) -> WebSocketFrame {
        WebSocketFrame(fin: true, opcode: .text, data: ByteBuffer(string: json))
    }

    func sse(_ request: Request, context: BasicRequestContext) async throws -> Response {
        let listener = try await authorize(request, context: context)
        guard request.headers[.accept]?.contains("text/event-stream") == true else {
            throw APIError.badRequest("Ask for text/event-stream, or upgrade to a WebSocket.")
        }
        var headers = HTTPFields()
        headers[.contentType] = "text/event-stream"
        headers[.cacheControl] = "no-cache"
        headers[HTTPField.Name("X-Accel-Buffering")!] = "no"
        // HEAD: what a stream would answer, without opening one.
        if request.method == .head { return Response(status: .ok, headers: headers) }
        let (id, messages, hello) = try await open(listener)
        let hub = self.hub, user = listener.user
        return Response(status: .ok, headers: headers, body: ResponseBody { writer in
            defer { hub.unsubscribe(user: user, id: id) }
            try await writer.write(ByteBuffer(string: Self.event(hello)))
            for await message in messages {
                try await writer.write(ByteBuffer(string: Self.event(message)))
            }
            try await writer.finish(nil)
        })
    }

    static func event(_ message: StreamMessage) -> String { "data: \(message.json)\n\n" }
}
