import HTTPSupport
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOHTTPTypes

/// `GET` and `HEAD /v1/stream` (not a WebSocket upgrade), answered on the connection as
/// Server-Sent Events: authorized and subscribed by a short task, then written to by the
/// hub through the stream's outlet, with no task per open stream. Every other request
/// passes on to the router. A stream request that arrives while the router still answers
/// an earlier request of the connection waits for that answer to end.
///
/// A refusal is problem+json, as the router would answer it, and closes the connection; so
/// does the answer to a `HEAD`.
final class ServerSentEventsHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    /// What the handler needs of the fanout, the same for every connection.
    struct Setup: Sendable {
        let routes: StreamRoutes
        let cors: HTTPSupport.CORSMiddleware<BasicRequestContext>
        let slow: Duration
    }

    private let setup: Setup
    private let logger: Logger
    /// Requests passed on whose answers have not ended.
    private var answering = 0
    /// The stream request waiting for `answering` to reach 0.
    private var waiting: HTTPRequest?
    private var stream: StreamConnection?

    init(setup: Setup, logger: Logger) {
        self.setup = setup
        self.logger = logger
    }

    /// Whether a request asks for a stream of Server-Sent Events: a `GET` or `HEAD` of
    /// `/v1/stream` that is no upgrade.
    static func asksForStream(getOrHead: Bool, target: String, upgrade: Bool) -> Bool {
        getOrHead && !upgrade && target.prefix { $0 != "?" } == "/v1/stream"
    }

    static func asksForStream(_ request: HTTPRequest) -> Bool {
        asksForStream(
            getOrHead: request.method == .get || request.method == .head, target: request.path ?? "",
            upgrade: request.headerFields[.upgrade] != nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        // Once a stream is asked for, the connection is its: nothing more is read as requests.
        guard stream == nil, waiting == nil else { return }
        if case .head(let request) = part {
            if Self.asksForStream(request) {
                if answering == 0 { begin(request, context: context) } else { waiting = request }
                return
            }
            answering += 1
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        context.write(data, promise: promise)
        guard stream == nil, case .end = unwrapOutboundIn(data) else { return }
        answering -= 1
        if answering == 0, let request = waiting {
            waiting = nil
            begin(request, context: context)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        stream?.connectionClosed()
        context.fireChannelInactive()
    }

    private func begin(_ request: HTTPRequest, context: ChannelHandlerContext) {
        let telemetry = RequestTelemetry(request: request, logger: logger, slow: setup.slow)
        let stream = StreamConnection(framing: .serverSentEvents, hub: setup.routes.hub, telemetry: telemetry)
        self.stream = stream
        let sink = stream.sink(on: context.eventLoop)
        let routes = setup.routes, logger = self.logger, channel = context.channel
        let cors = setup.cors.responseHeaders(for: request)
        var streamHeaders = StreamRoutes.eventStreamHeaders
        streamHeaders.append(contentsOf: cors)
        stream.begin(context: context, open: {
            await routes.open(Request(head: request, body: .init(buffer: ByteBuffer())), channel: channel, logger: logger, sink: sink)
        }, answer: { opening in
            switch opening {
            case .refused(let problem):
                var bytes = 0
                for part in StreamServerChannel.closingAnswer(problem, adding: cors) {
                    if case .body(let body) = part { bytes += body.readableBytes }
                    context.write(self.wrapOutboundOut(part), promise: nil)
                }
                context.flush()
                stream.refused(status: problem.status, bytes: bytes)
                context.close(promise: nil)
            case .described:
                streamHeaders[.connection] = "close"
                context.write(self.wrapOutboundOut(.head(HTTPResponse(status: .ok, headerFields: streamHeaders))), promise: nil)
                context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil)
                context.close(promise: nil)
            case .opened(_, _, let hello):
                context.write(self.wrapOutboundOut(.head(HTTPResponse(status: .ok, headerFields: streamHeaders))), promise: nil)
                stream.outlet.start(context: context, hello: hello)
            }
        })
    }
}
