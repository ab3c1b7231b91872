import HTTPTypes
import Hummingbird
import NIOCore
import NIOHTTP1
import NIOHTTPTypes

/// The HTTP server's own refusals as problem+json. A request that cannot be parsed — a
/// request line or header block over the decoder's limit, a malformed chunk size — gets
/// a bare `400` with no body from Hummingbird; placed after the HTTP codec, this handler
/// writes the problem instead. After a parse error the rest of the byte stream cannot be
/// trusted: the first answer that follows it says `Connection: close`, the connection is
/// closed once it is written, and nothing after it is sent.
public final class ProtocolErrorProblemHandler: ChannelDuplexHandler, RemovableChannelHandler {
    public typealias InboundIn = HTTPRequestPart
    public typealias InboundOut = HTTPRequestPart
    public typealias OutboundIn = HTTPResponsePart
    public typealias OutboundOut = HTTPResponsePart

    private var parseError: HTTPParserError?
    /// A whole answer was written after the parse error.
    private var answered = false

    public init() {}

    public func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if parseError == nil, let error = error as? HTTPParserError { parseError = error }
        context.fireErrorCaught(error)
    }

    public func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard let parseError else { return context.write(data, promise: promise) }
        guard !answered else {
            promise?.succeed(())
            return
        }
        switch unwrapOutboundIn(data) {
        case .head(let head) where head.status == .badRequest && head.headerFields[.contentLength] == "0":
            let problem = APIError.malformedHTTP(parseError)
            var fields = problem.headers
            fields[.connection] = "close"
            fields[.contentLength] = String(problem.body.readableBytes)
            context.write(wrapOutboundOut(.head(HTTPResponse(status: problem.status, headerFields: fields))), promise: nil)
            context.write(wrapOutboundOut(.body(problem.body)), promise: promise)
        case .head(var head):
            head.headerFields[.connection] = "close"
            context.write(wrapOutboundOut(.head(head)), promise: promise)
        case .end:
            answered = true
            context.writeAndFlush(data, promise: promise)
            context.close(promise: nil)
        case .body:
            context.write(data, promise: promise)
        }
    }
}

extension APIError {
    /// What a request that is not valid HTTP/1.1 is answered.
    public static func malformedHTTP(_ error: HTTPParserError) -> APIError {
        switch error {
        case .headerOverflow:
            return APIError(
                status: .requestHeaderFieldsTooLarge, code: .invalidRequest,
                detail: "The request line and headers are larger than the server accepts (80 KiB).")
        case .invalidChunkSize, .invalidEOFState:
            return .badRequest("The chunked request body is malformed.")
        default:
            return .badRequest("The request is not valid HTTP/1.1: \(error.debugDescription).")
        }
    }
}
