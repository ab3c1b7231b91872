import NIOCore
import NIOHTTPTypes
import NIOWebSocket

/// Where the hub sends one stream's messages. The hub calls it from any thread.
protocol StreamSink: Sendable {
    func send(_ message: StreamMessage)
    /// The stream is over (revocation, a space left, shutdown): it ends its response and
    /// closes.
    func finish()
}

/// One open stream on its connection, on the channel's event loop: the hub's messages go
/// out as Server-Sent Events or WebSocket text frames, in order, with no task waiting per
/// stream (a task keeps the deepest its stack ever went for as long as it lives, which
/// was most of a stream's memory).
///
/// Messages the hub sends before the stream has started (its `hello` is read after it
/// subscribes) wait, the newest 64, and go out after the `hello`. A stream whose client
/// reads so slowly that the connection's outgoing buffer passes its high-water mark is
/// closed: its client reconnects and the new `hello` carries its cursors.
final class StreamOutlet {
    enum Framing { case serverSentEvents, webSocket }

    private let framing: Framing
    private var context: ChannelHandlerContext?
    private var waiting: [StreamMessage] = []
    private var finished = false
    /// Bytes of messages written, for the stream's log line.
    private(set) var bytes = 0

    init(framing: Framing) { self.framing = framing }

    /// Writes `hello`, then what waited, through `context` (the handler that owns the
    /// connection's framing).
    func start(context: ChannelHandlerContext, hello: StreamMessage) {
        // The hub ended the stream before it started (its device revoked meanwhile).
        guard !finished else { return context.close(promise: nil) }
        self.context = context
        write(hello)
        waiting.forEach(write)
        waiting = []
        context.flush()
    }

    func send(_ message: StreamMessage) {
        guard !finished else { return }
        guard let context else {
            if waiting.count == 64 { waiting.removeFirst() }
            waiting.append(message)
            return
        }
        guard context.channel.isWritable else {
            finished = true
            context.close(promise: nil)
            return
        }
        write(message)
        context.flush()
    }

    /// Ends the stream: the end of the SSE response, or a WebSocket close frame (normal
    /// closure); then the connection closes.
    func finish() {
        guard !finished else { return }
        finished = true
        guard let context else { return }
        switch framing {
        case .serverSentEvents:
            context.write(NIOAny(HTTPResponsePart.end(nil)), promise: nil)
        case .webSocket:
            var code = context.channel.allocator.buffer(capacity: 2)
            code.write(webSocketErrorCode: .normalClosure)
            context.write(NIOAny(WebSocketFrame(fin: true, opcode: .connectionClose, data: code)), promise: nil)
        }
        context.flush()
        context.close(promise: nil)
    }

    private func write(_ message: StreamMessage) {
        guard let context else { return }
        let json = message.json
        switch framing {
        case .serverSentEvents:
            var buffer = context.channel.allocator.buffer(capacity: json.utf8.count + 8)
            buffer.writeString("data: ")
            buffer.writeString(json)
            buffer.writeString("\n\n")
            bytes += buffer.readableBytes
            context.write(NIOAny(HTTPResponsePart.body(buffer)), promise: nil)
        case .webSocket:
            let buffer = context.channel.allocator.buffer(string: json)
            bytes += buffer.readableBytes
            context.write(NIOAny(WebSocketFrame(fin: true, opcode: .text, data: buffer)), promise: nil)
        }
    }
}

/// The hub's handle on an outlet: every call hops to the outlet's event loop.
struct OutletSink: StreamSink {
    let outlet: NIOLoopBound<StreamOutlet>

    func send(_ message: StreamMessage) {
        let outlet = self.outlet
        outlet.eventLoop.execute { outlet.value.send(message) }
    }

    func finish() {
        let outlet = self.outlet
        outlet.eventLoop.execute { outlet.value.finish() }
    }
}
