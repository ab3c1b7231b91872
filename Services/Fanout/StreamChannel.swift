import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import HTTPSupport
import NIOWebSocket
import ServiceSupport

/// The fanout's connections: HTTP/1.1 (streams of Server-Sent Events, operations
/// endpoints) and the WebSocket upgrade of `/v1/stream`.
///
/// Written here rather than taken from hummingbird-websocket, whose channel answers every
/// refused upgrade with a bare `400` and no body: here a refused upgrade is answered with
/// the same problem+json as a refused Server-Sent Events stream (401, 403, 404, 429). The
/// first request's head must also arrive within the idle timeout (Hummingbird's timer
/// starts only once the connection is known to be plain HTTP).
///
/// An open stream has no task: its connection's handlers (`ServerSentEventsHandler`,
/// `WebSocketStreamHandler`) carry it. A connection whose first request is a stream never
/// reaches the router; one that began with another request keeps the router for those.
struct StreamServerChannel: ServerChildChannel, HTTPChannelHandler {
    /// What to do with an upgrade request.
    enum Decision: Sendable {
        case upgrade(StreamRoutes.Listener, RequestTelemetry)
        case refuse(APIError)
    }

    enum Negotiated: Sendable {
        /// A stream: its handlers carry it from here.
        case stream
        case http(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>)
        case refused(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>, APIError)
    }

    struct Value: ServerChildChannelValue {
        let negotiated: EventLoopFuture<Negotiated>
        let channel: any Channel
    }

    let responder: Responder
    let idleTimeout: TimeAmount
    let streams: ServerSentEventsHandler.Setup
    /// The connections held, against their limits.
    let connections: ConnectionCounter
    /// Whether an upgrade request becomes a stream.
    let decide: @Sendable (Request, any Channel, Logger) async -> Decision

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        let idleTimeout = self.idleTimeout, decide = self.decide, streams = self.streams, connections = self.connections
        return channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(ConnectionLimitHandler(counter: connections), position: .first)
            // Reads start at 512 bytes rather than NIO's 2,048 (and grow when more comes):
            // the buffer of the first read stays with the connection's HTTP decoder for as
            // long as a stream is open, and a stream's request is a few hundred bytes.
            try channel.syncOptions?.setOption(
                ChannelOptions.recvAllocator, value: AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 512, maximum: 65536))
            try channel.pipeline.syncOperations.addHandler(FirstAnswerDeadlineHandler(timeout: idleTimeout), position: .first)
            let decision = NIOLockedValueBox<Decision?>(nil)
            let firstIsStream = NIOLoopBoundBox(false, eventLoop: channel.eventLoop)
            let upgrader = NIOTypedWebSocketServerUpgrader<Negotiated>(
                shouldUpgrade: { channel, head in
                    let promise = channel.eventLoop.makePromise(of: HTTPHeaders?.self)
                    promise.completeWithTask {
                        let decided: Decision
                        if let request = try? HTTPRequest(head, secure: false, splitCookie: false) {
                            decided = await decide(Request(head: request, body: .init(buffer: ByteBuffer())), channel, logger)
                        } else {
                            decided = .refuse(.badRequest("The upgrade request is malformed."))
                        }
                        decision.withLockedValue { $0 = decided }
                        if case .upgrade = decided { return HTTPHeaders() }
                        return nil
                    }
                    return promise.futureResult
                },
                upgradePipelineHandler: { channel, _ in
                    channel.eventLoop.makeCompletedFuture {
                        guard case .upgrade(let listener, let telemetry)? = decision.withLockedValue({ $0 }) else {
                            throw ChannelError.inappropriateOperationForState
                        }
                        let stream = StreamConnection(framing: .webSocket, hub: streams.routes.hub, telemetry: telemetry)
                        try channel.pipeline.syncOperations.addHandler(WebSocketStreamHandler(stream: stream) { sink in
                            do {
                                return try await streams.routes.open(listener, sink: sink)
                            } catch {
                                logger.debug("WebSocket stream not opened", metadata: ["error": "\(error)"])
                                return .refused(APIError.problem(for: error, logger: logger))
                            }
                        })
                        return .stream
                    }
                })
            var configuration = NIOUpgradableHTTPServerPipelineConfiguration<Negotiated>(
                upgradeConfiguration: NIOTypedHTTPServerUpgradeConfiguration(
                    upgraders: [upgrader],
                    notUpgradingCompletionHandler: { channel in
                        channel.eventLoop.makeCompletedFuture {
                            let pipeline = channel.pipeline.syncOperations
                            try pipeline.addHandler(HTTP1ToHTTPServerCodec(secure: false))
                            let refusal: APIError? = if case .refuse(let problem)? = decision.withLockedValue({ $0 }) { problem } else { nil }
                            if refusal == nil { try pipeline.addHandler(ServerSentEventsHandler(setup: streams, logger: logger)) }
                            if firstIsStream.value, refusal == nil { return .stream }
                            try pipeline.addHandler(HTTPConnectionStateHandler(idleTimeout: .init(idleTimeout), logger: logger))
                            let http = try NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>(
                                wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true))
                            // A refused upgrade request is not replayed to the HTTP pipeline:
                            // it is answered here.
                            if let refusal { return .refused(http, refusal) }
                            return .http(http)
                        }
                    }))
            configuration.enablePipelining = false  // NIOAsyncChannel reads one request at a time
            configuration.enableErrorHandling = false  // Hummingbird's HTTP handling answers errors
            configuration.enableResponseHeaderValidation = false  // swift-http-types validated them
            let negotiated = try channel.pipeline.syncOperations.configureUpgradableHTTPServerPipeline(configuration: configuration)
            let upgrade = try channel.pipeline.syncOperations.handler(type: NIOTypedHTTPServerUpgradeHandler<Negotiated>.self)
            try channel.pipeline.syncOperations.addHandler(FirstRequestPeek(isStream: firstIsStream), position: .before(upgrade))
            try channel.pipeline.syncOperations.addHandler(FirstRequestParseErrorAnswer(), position: .before(upgrade))
            return Value(negotiated: negotiated, channel: channel)
        }
    }

    func handle(value: Value, logger: Logger) async {
        do {
            switch try await value.negotiated.get() {
            case .http(let http): await handleHTTP(asyncChannel: http, logger: logger)
            case .stream: return
            case .refused(let http, let problem): try await Self.answer(http, with: problem)
            }
        } catch {
            logger.debug("connection ended before its first request", metadata: ["error": "\(error)"])
        }
    }
}

/// Notes whether a connection's first request asks for a stream of Server-Sent Events, so
/// that such a connection is set up without the router; then leaves the pipeline.
private final class FirstRequestPeek: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart

    private let isStream: NIOLoopBoundBox<Bool>

    init(isStream: NIOLoopBoundBox<Bool>) { self.isStream = isStream }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(let head) = unwrapInboundIn(data) {
            isStream.value = ServerSentEventsHandler.asksForStream(
                getOrHead: head.method == .GET || head.method == .HEAD, target: head.uri, upgrade: !head.headers["upgrade"].isEmpty)
            context.fireChannelRead(data)
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            return
        }
        context.fireChannelRead(data)
    }
}

/// Answers a first request that cannot be parsed (headers over the decoder's 80 KiB, bad
/// syntax) with its problem — 431 or 400 — and closes, as the gateway does: before a
/// request's head the connection has no HTTP handler of Hummingbird's to answer it, and
/// would stay silent until the idle timeout. Leaves the pipeline with the first head.
private final class FirstRequestParseErrorAnswer: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head = unwrapInboundIn(data) {
            context.fireChannelRead(data)
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            return
        }
        context.fireChannelRead(data)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard let parseError = error as? HTTPParserError else { return context.fireErrorCaught(error) }
        let problem = APIError.malformedHTTP(parseError)
        var headers = HTTPHeaders(problem.headers.map { ($0.name.rawName, $0.value) })
        headers.replaceOrAdd(name: "Content-Length", value: String(problem.body.readableBytes))
        headers.replaceOrAdd(name: "Connection", value: "close")
        let status = HTTPResponseStatus(statusCode: Int(problem.status.code))
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(problem.body))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in context.close(promise: nil) }
    }
}

extension StreamServerChannel {
    /// Writes the problem as the answer to the refused upgrade request and closes.
    static func answer(_ http: NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>, with problem: APIError) async throws {
        try await http.executeThenClose { _, outbound in try await outbound.write(contentsOf: closingAnswer(problem)) }
    }

    /// A refused stream's answer, after which the connection closes: the problem, with
    /// `extra` headers (CORS).
    static func closingAnswer(_ problem: APIError, adding extra: HTTPFields = [:]) -> [HTTPResponsePart] {
        var headers = problem.headers
        headers.append(contentsOf: extra)
        let body = problem.body
        headers[.contentLength] = String(body.readableBytes)
        headers[.connection] = "close"
        return [.head(HTTPResponse(status: problem.status, headerFields: headers)), .body(body), .end(nil)]
    }
}
