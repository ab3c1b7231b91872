import Foundation
import HTTPSupport
import HTTPTypes
import NIOCore
import SyncModels
import Tracing

/// One stream's life on its connection, shared by the Server-Sent Events and WebSocket
/// handlers: opening it (authorization and the hub's subscription run as a short task
/// that ends once the stream is open), starting its outlet, and, when the connection
/// closes, leaving the hub and logging the stream's line. Confined to the channel's event
/// loop.
final class StreamConnection {
    let outlet: StreamOutlet
    private let hub: Hub
    private let telemetry: RequestTelemetry
    /// Set once subscribed, until the hub is left.
    private var subscription: (user: UserID, id: UUID)?
    private var closed = false
    /// The status the stream's log line gives.
    private let status: HTTPResponse.Status

    init(framing: StreamOutlet.Framing, hub: Hub, telemetry: RequestTelemetry) {
        outlet = StreamOutlet(framing: framing)
        self.hub = hub
        self.telemetry = telemetry
        status = framing == .webSocket ? .switchingProtocols : .ok
    }

    /// The sink the hub sends to.
    func sink(on eventLoop: any EventLoop) -> OutletSink {
        OutletSink(outlet: NIOLoopBound(outlet, eventLoop: eventLoop))
    }

    /// Runs `open` and, on the event loop, `answer` with what it came to; an opened stream
    /// whose connection closed meanwhile leaves the hub at once.
    func begin(
        context: ChannelHandlerContext, open: @escaping @Sendable () async -> StreamRoutes.Opening,
        answer: @escaping (StreamRoutes.Opening) -> Void
    ) {
        let promise = context.eventLoop.makePromise(of: StreamRoutes.Opening.self)
        let traced = telemetry.context
        promise.completeWithTask { await ServiceContext.withValue(traced) { await open() } }
        promise.futureResult.assumeIsolated().whenSuccess { opening in
            if case .opened(let user, let id, _) = opening { self.subscription = (user, id) }
            if self.closed {
                self.leave()
                return
            }
            answer(opening)
        }
    }

    /// A refusal was answered (`status`, `bytes`): the log line now; the connection closes.
    func refused(status: HTTPResponse.Status, bytes: Int) {
        telemetry.finish(route: "/v1/stream", status: status, bytes: bytes)
        closed = true
    }

    /// The connection closed: leave the hub and log the stream's line (once).
    func connectionClosed() {
        guard !closed else { return }
        closed = true
        leave()
        telemetry.finish(route: "/v1/stream", status: status, bytes: outlet.bytes)
    }

    private func leave() {
        guard let (user, id) = subscription else { return }
        subscription = nil
        hub.unsubscribe(user: user, id: id)
    }
}
