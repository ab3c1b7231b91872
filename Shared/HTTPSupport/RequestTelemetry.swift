import HTTPTypes
import Hummingbird
import Logging
import NIOConcurrencyHelpers
import ServiceSupport
import Tracing

/// Around every request: its trace (the caller's `traceparent`, or a new one), an HTTP
/// server span when tracing is on, and one log line once the response is written —
/// method, route template (never the raw path, which holds ids), status, duration, bytes
/// and trace id. A request slower than `slow` logs that line as a warning.
public struct RequestTelemetryMiddleware<Context: RequestContext>: RouterMiddleware {
    let logger: Logger
    let slow: Duration

    public init(logger: Logger, slow: Duration) {
        self.logger = logger
        self.slow = slow
    }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let exchange = RequestTelemetry(request: request.head, logger: logger, slow: slow)
        return try await ServiceContext.withValue(exchange.context) {
            do {
                var response: Response
                do {
                    response = try await next(request, context)
                } catch let error as any HTTPResponseError {
                    // Answered here rather than by the server, so that its bytes are counted.
                    response = try error.response(from: request, context: context)
                }
                let status = response.status, route = context.endpointPath
                let body = response.body
                let bytes = NIOLockedValueBox(0)
                response.body = ResponseBody(contentLength: body.contentLength) { writer in
                    do {
                        try await body.write(CountingWriter(base: writer, bytes: bytes))
                        exchange.finish(route: route, status: status, bytes: bytes.withLockedValue { $0 })
                    } catch {
                        exchange.finish(route: route, status: status, bytes: bytes.withLockedValue { $0 }, error: error)
                        throw error
                    }
                }
                return response
            } catch {
                exchange.finish(
                    route: context.endpointPath, status: (error as? any HTTPResponseError)?.status ?? .internalServerError,
                    bytes: 0, error: error)
                throw error
            }
        }
    }
}

/// One request's trace, span and log line; shared by the middleware and the routes that
/// answer outside it (a WebSocket upgrade).
public struct RequestTelemetry: Sendable {
    public let context: ServiceContext
    private let span: (any Span)?
    private let method: String
    private let started = ContinuousClock.now
    private let logger: Logger
    private let slow: Duration

    public init(request: HTTPRequest, logger: Logger, slow: Duration) {
        let parent = Traces.requestContext(
            traceparent: request.headerFields[.traceparent], tracestate: request.headerFields[.tracestate])
        method = request.method.rawValue
        if let tracer = Traces.tracer {
            let span = tracer.startSpan(method, context: parent, ofKind: .server)
            span.attributes["http.request.method"] = method
            span.attributes["url.path"] = request.path.map { Self.bounded(String($0.prefix { $0 != "?" })) }
            span.attributes["user_agent.original"] = request.headerFields[.userAgent].map(Self.bounded)
            self.span = span
            context = Traces.context(of: span)
        } else {
            span = nil
            context = parent
        }
        self.logger = logger
        self.slow = slow
    }

    /// The longest text a client sends that a span keeps as an attribute.
    public static let maxAttribute = 256

    /// A client's text as a span keeps it: at most `maxAttribute` bytes (cut at a
    /// character), so that a 60 KB path or agent is not exported with every request.
    public static func bounded(_ text: String) -> String {
        guard text.utf8.count > maxAttribute else { return text }
        var cut = ""
        for character in text {
            guard cut.utf8.count + character.utf8.count <= maxAttribute - 3 else { break }
            cut.append(character)
        }
        return cut + "…"
    }

    /// The response is written (or failed): ends the span and logs the line.
    public func finish(route: String?, status: HTTPResponse.Status, bytes: Int, error: (any Error)? = nil) {
        let took = ContinuousClock.now - started
        let route = route ?? "unmatched"
        if let span {
            span.operationName = "\(method) \(route)"
            span.attributes["http.route"] = route
            span.attributes["http.response.status_code"] = Int(status.code)
            span.attributes["http.response.body.size"] = bytes
            if status.code >= 500 { span.setStatus(SpanStatus(code: .error)) }
            if let error { span.recordError(error) }
            span.end()
        }
        var metadata: Logger.Metadata = [
            "http.request.method": "\(method)", "http.route": "\(route)", "http.response.status_code": "\(status.code)",
            "duration_ms": "\(Self.milliseconds(took))", "http.response.body.size": "\(bytes)",
        ]
        if let traceID = Traces.traceID(of: context.traceparent) { metadata["trace.id"] = "\(traceID)" }
        if let error, status.code >= 500 { metadata["error"] = "\(error)" }
        logger.log(level: took > slow ? .warning : .info, took > slow ? "slow request" : "request", metadata: metadata)
    }
}

extension RequestTelemetry {
    /// `duration` in milliseconds, to the microsecond (for log lines).
    public static func milliseconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return ((Double(seconds) * 1000 + Double(attoseconds) / 1e15) * 1000).rounded() / 1000
    }
}

/// Counts the bytes of a response body as they are written.
private struct CountingWriter: ResponseBodyWriter {
    var base: any ResponseBodyWriter
    let bytes: NIOLockedValueBox<Int>

    mutating func write(_ buffer: ByteBuffer) async throws {
        bytes.withLockedValue { $0 += buffer.readableBytes }
        try await base.write(buffer)
    }

    consuming func finish(_ trailingHeaders: HTTPFields?) async throws {
        try await base.finish(trailingHeaders)
    }
}

extension HTTPField.Name {
    public static let traceparent = HTTPField.Name("traceparent")!
    public static let tracestate = HTTPField.Name("tracestate")!
}
