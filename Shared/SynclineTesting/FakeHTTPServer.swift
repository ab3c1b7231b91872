import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// HTTP/1.1 on 127.0.0.1 for the fake server: each request is read whole and answered by
/// `FakeSyncServer`; `GET /v1/stream` stays open as a Server-Sent Events stream.
final class FakeHTTPHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let server: FakeServerCore
    private var head: HTTPRequestHead?
    private var body = ByteBuffer()

    init(server: FakeServerCore) {
        self.server = server
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            body.clear()
        case .body(var part):
            body.writeBuffer(&part)
        case .end:
            guard let head else { return }
            self.head = nil
            var headers: [String: String] = [:]
            for (name, value) in head.headers { headers[name] = value }
            let request = FakeRequest(method: head.method.rawValue, uri: head.uri, headers: headers, body: Data(body.readableBytesView))
            if request.method == "GET", request.path == "/v1/stream" {
                switch server.openStream(request, channel: context.channel) {
                case .opened(_, let hello):
                    // No length: HTTP/1.1 chunks the body, one event after another.
                    let fields = HTTPHeaders([("Content-Type", "text/event-stream"), ("Cache-Control", "no-store")])
                    context.write(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: .ok, headers: fields))), promise: nil)
                    context.writeAndFlush(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: hello.event)))), promise: nil)
                case .refused(let answer):
                    write(answer, version: head.version, keepAlive: head.isKeepAlive, context: context)
                }
                return
            }
            write(server.answer(request), version: head.version, keepAlive: head.isKeepAlive, context: context)
        }
    }

    private func write(_ answer: FakeAnswer, version: HTTPVersion, keepAlive: Bool, context: ChannelHandlerContext) {
        var fields = HTTPHeaders(answer.headers.map { ($0.key, $0.value) })
        fields.replaceOrAdd(name: "Content-Length", value: String(answer.body.count))
        if !keepAlive { fields.replaceOrAdd(name: "Connection", value: "close") }
        let status = HTTPResponseStatus(statusCode: answer.status)
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: version, status: status, headers: fields))), promise: nil)
        if !answer.body.isEmpty {
            context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: answer.body)))), promise: nil)
        }
        let done = context.writeAndFlush(wrapOutboundOut(.end(nil)))
        if !keepAlive {
            let channel = context.channel
            done.whenComplete { _ in channel.close(promise: nil) }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        server.streamEnded(context.channel)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

/// Binds the listening socket; every connection gets an HTTP/1.1 pipeline.
enum FakeHTTPListener {
    /// Listens on `port` of 127.0.0.1 (0: a free one); the connections it accepts are
    /// known to `server` by that port, to be closed with it.
    static func bind(server: FakeServerCore, group: any EventLoopGroup, port: Int = 0) -> EventLoopFuture<any Channel> {
        ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                server.accepted(channel)
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(FakeHTTPHandler(server: server))
                }
            }
            .bind(host: "127.0.0.1", port: port)
    }
}
