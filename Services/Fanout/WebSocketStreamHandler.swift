import HTTPSupport
import NIOCore
import NIOWebSocket

/// A WebSocket stream after its upgrade: opened by a short task (the hub's subscription
/// and the `hello`), then written to by the hub through the stream's outlet as text
/// frames. Pings are answered, a close frame is echoed and closes the connection, anything
/// else the client sends is ignored.
final class WebSocketStreamHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private let stream: StreamConnection
    private let open: @Sendable (any StreamSink) async -> StreamRoutes.Opening

    init(stream: StreamConnection, open: @escaping @Sendable (any StreamSink) async -> StreamRoutes.Opening) {
        self.stream = stream
        self.open = open
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let sink = stream.sink(on: context.eventLoop), open = self.open
        stream.begin(context: context, open: { await open(sink) }, answer: { [stream] opening in
            guard case .opened(_, _, let hello) = opening else { return context.close(promise: nil) }
            stream.outlet.start(context: context, hello: hello)
        })
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .ping:
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData)), promise: nil)
        case .connectionClose:
            let echo = WebSocketFrame(fin: true, opcode: .connectionClose, data: frame.unmaskedData)
            context.writeAndFlush(wrapOutboundOut(echo)).assumeIsolated().whenComplete { _ in context.close(promise: nil) }
        default:
            break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        stream.connectionClosed()
        context.fireChannelInactive()
    }
}
