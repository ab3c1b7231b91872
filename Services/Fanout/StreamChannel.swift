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

/// The fanout's connections: HTTP/1.1 (SSE, operations endpoints) and the WebSocket
/// upgrade of `/v1/stream`.
///
/// Written here rather than taken from hummingbird-websocket, whose channel answers every
/// refused upgrade with a bare `400` and no body: here a refused upgrade is answered with
/// the same problem+json as a refused Server-Sent Events stream (401, 403, 404, 429). The
/// first request's head must also arrive within the idle timeout (Hummingbird's timer
/// starts only once the connection is known to be plain HTTP).
struct StreamServerChannel: ServerChildChannel, HTTPChannelHandler {
    /// What a WebSocket connection runs once upgraded.
    typealias Session = @Sendable (NIOAsyncChannel<WebSocketFrame, WebSocketFrame>) async -> Void

    /// What to do with an upgrade request.
    enum Decision: Sendable {
        case upgrade(Session)
        case refuse(APIError)
    }

    enum Negotiated: Sendable {
        case webSocket(NIOAsyncChannel<WebSocketFrame, WebSocketFrame>, Session)
        case http(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>)
        case refused(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>, APIError)
    }

    struct Value: ServerChildChannelValue {
        let negotiated: EventLoopFuture<Negotiated>
        let channel: any Channel
    }

    let responder: Responder
    let idleTimeout: TimeAmount
    /// Whether an upgrade request becomes a stream.
    let decide: @Sendable (Request, any Channel, Logger) async -> Decision

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        let idleTimeout = self.idleTimeout, decide = self.decide
        return channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(FirstAnswerDeadlineHandler(timeout: idleTimeout), position: .first)
            let decision = NIOLockedValueBox<Decision?>(nil)
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
                        guard case .upgrade(let session)? = decision.withLockedValue({ $0 }) else {
                            throw ChannelError.inappropriateOperationForState
                        }
                        let frames = try NIOAsyncChannel<WebSocketFrame, WebSocketFrame>(
                            wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true))
                        return .webSocket(frames, session)
                    }
                })
            var configuration = NIOUpgradableHTTPServerPipelineConfiguration<Negotiated>(
                upgradeConfiguration: NIOTypedHTTPServerUpgradeConfiguration(
                    upgraders: [upgrader],
                    notUpgradingCompletionHandler: { channel in
                        channel.eventLoop.makeCompletedFuture {
                            try channel.pipeline.syncOperations.addHandler(HTTP1ToHTTPServerCodec(secure: false))
                            try channel.pipeline.syncOperations.addHandler(
                                HTTPConnectionStateHandler(idleTimeout: .init(idleTimeout), logger: logger))
                            let http = try NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>(
                                wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true))
                            // A refused upgrade request is not replayed to the HTTP pipeline:
                            // it is answered here.
                            if case .refuse(let problem)? = decision.withLockedValue({ $0 }) { return .refused(http, problem) }
                            return .http(http)
                        }
                    }))
            configuration.enablePipelining = false  // NIOAsyncChannel reads one request at a time
            configuration.enableErrorHandling = false  // Hummingbird's HTTP handling answers errors
            configuration.enableResponseHeaderValidation = false  // swift-http-types validated them
            let negotiated = try channel.pipeline.syncOperations.configureUpgradableHTTPServerPipeline(configuration: configuration)
            return Value(negotiated: negotiated, channel: channel)
        }
    }

    func handle(value: Value, logger: Logger) async {
        do {
            switch try await value.negotiated.get() {
            case .http(let http): await handleHTTP(asyncChannel: http, logger: logger)
            case .webSocket(let frames, let session): await session(frames)
            case .refused(let http, let problem): try await Self.answer(http, with: problem)
            }
        } catch {
            logger.debug("connection ended before its first request", metadata: ["error": "\(error)"])
        }
    }
}

extension StreamServerChannel {
    /// Writes the problem as the answer to the refused upgrade request and closes.
    static func answer(_ http: NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>, with problem: APIError) async throws {
        try await http.executeThenClose { _, outbound in
            var headers = problem.headers
            let body = problem.body
            headers[.contentLength] = String(body.readableBytes)
            headers[.connection] = "close"
            try await outbound.write(contentsOf: [
                .head(HTTPResponse(status: problem.status, headerFields: headers)), .body(body), .end(nil),
            ])
        }
    }
}
