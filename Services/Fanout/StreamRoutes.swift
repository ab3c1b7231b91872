import Auth
import Foundation
import HTTPSupport
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import Persistence
import ServiceSupport
import SyncModels
import Tracing

/// `GET /v1/stream?device_id=…[&space_id=…]`: Server-Sent Events for `Accept:
/// text/event-stream`, a WebSocket for an upgrade request; the pokes of every space of the
/// user, or of `space_id` alone. Refusals are problem+json: 400 (malformed ids), 401
/// (token), 403 (revoked device), 404 (unknown or foreign device, a space the user is not
/// in), 429 (too many new streams, or too many open ones), for a WebSocket upgrade as for
/// Server-Sent Events.
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
        let deviceID: DeviceID
        /// The one space the stream is narrowed to; nil: every space of the user.
        let space: SpaceID?
        /// When the token the stream was opened with stops being accepted (`exp` and the
        /// leeway every service gives it, Unix seconds): the stream ends then, and the
        /// client opens it again with a fresh token.
        let expires: Int64
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
        return Listener(user: claims.user, deviceID: device, space: space, expires: claims.exp + TokenPolicy.standardLeewaySeconds)
    }

    /// What opening a stream came to.
    enum Opening: Sendable {
        /// The problem to answer with; no stream.
        case refused(APIError)
        /// A `HEAD`: what a stream would answer, without one.
        case described
        /// Subscribed: the stream starts with `hello`.
        case opened(user: UserID, id: UUID, hello: StreamMessage)
    }

    /// Authorizes a request for a stream and subscribes `sink` (Server-Sent Events must be
    /// asked for; a WebSocket's upgrade is authorized before it is answered, then opened).
    func open(_ request: Request, channel: any Channel, logger: Logger, sink: any StreamSink) async -> Opening {
        do {
            let listener = try await authorize(request, context: BasicRequestContext(source: .init(channel: channel, logger: logger)))
            guard request.headers[.accept]?.contains("text/event-stream") == true else {
                throw APIError.badRequest("Ask for text/event-stream, or upgrade to a WebSocket.")
            }
            if request.method == .head { return .described }
            return try await open(listener, sink: sink)
        } catch {
            return .refused(APIError.problem(for: error, logger: logger))
        }
    }

    /// Subscribes the listener, then reads where their stream starts; a space they left
    /// in between is refused as unknown.
    func open(_ listener: Listener, sink: any StreamSink) async throws -> Opening {
        let id = try await hub.subscribe(
            user: listener.user, deviceID: listener.deviceID, space: listener.space, expires: listener.expires, sink: sink)
        do {
            guard let start = try await pulls.streamStart(user: listener.user, space: listener.space) else {
                throw APIError.notFound("No such space.")
            }
            return .opened(user: listener.user, id: id, hello: .hello(start))
        } catch {
            hub.unsubscribe(user: listener.user, id: id)
            throw error
        }
    }

    /// `GET` and `HEAD /v1/stream` are answered on the connection before routing
    /// (`ServerSentEventsHandler`); the route is here so that the router answers other
    /// methods with 405 and preflights as it does any route's.
    func registerHTTP(on router: Router<BasicRequestContext>) {
        router.get("/v1/stream") { _, _ -> Response in
            throw APIError.badRequest("Ask for text/event-stream, or upgrade to a WebSocket.")
        }
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
                return .upgrade(listener, telemetry)
            } catch {
                let refusal = APIError.problem(for: error, logger: logger)
                telemetry.finish(route: route, status: refusal.status, bytes: 0)
                return .refuse(refusal)
            }
        }
    }

    /// The headers of a stream's answer.
    static let eventStreamHeaders: HTTPFields = [
        .contentType: "text/event-stream", .cacheControl: "no-cache", HTTPField.Name("X-Accel-Buffering")!: "no",
    ]
}
