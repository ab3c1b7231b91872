import HTTPTypes
import Hummingbird

/// CORS for browsers on the origins of `CORS_ALLOWED_ORIGINS` (or `*`); paths under
/// `openPrefixes` (public content) answer any origin. Hummingbird's CORSMiddleware takes
/// one origin rule for every path and its origin list only as variadic arguments, so the
/// rule lives here. No credentials (cookies) are involved: tokens travel as bearer headers.
public struct CORSMiddleware<Context: RequestContext>: RouterMiddleware {
    let origins: Set<String>
    let anyOrigin: Bool
    let openPrefixes: [String]
    let allowMethods: String
    /// Besides the API's own: `Range` and `If-Range` for files, and the tus headers, so
    /// browser tus clients work unchanged.
    static var allowHeaders: String {
        "Authorization, Content-Type, Idempotency-Key, traceparent, If-None-Match, Accept, Range, If-Range, "
            + "Tus-Resumable, Upload-Length, Upload-Metadata, Upload-Offset, X-HTTP-Method-Override"
    }
    static var exposeHeaders: String {
        "Location, Retry-After, ETag, Content-Range, Content-Length, Accept-Ranges, "
            + "Tus-Resumable, Tus-Version, Tus-Extension, Tus-Max-Size, Upload-Offset, Upload-Length"
    }

    public init(allowedOrigins: [String], openPrefixes: [String] = [], methods: [HTTPRequest.Method] = [.get, .head, .post, .put, .patch, .delete]) {
        anyOrigin = allowedOrigins.contains("*")
        origins = Set(allowedOrigins)
        self.openPrefixes = openPrefixes
        allowMethods = (methods + [.options]).map(\.rawValue).joined(separator: ", ")
    }

    /// The `Access-Control-Allow-Origin` value for this request, or nil (not allowed).
    func allowedOrigin(_ request: HTTPRequest) -> String? {
        guard let origin = request.headerFields[.origin], origin != "null" else { return nil }
        let path = request.path.map { $0.prefix { $0 != "?" } } ?? ""
        if anyOrigin || openPrefixes.contains(where: { path.hasPrefix($0) }) { return "*" }
        return origins.contains(origin) ? origin : nil
    }

    /// What a response to `request` (not a preflight) carries for CORS: for a request
    /// from a browser's page, the origin it may be read from, if any, and `Vary: Origin`.
    /// For responses written outside the router (fanout's streams).
    public func responseHeaders(for request: HTTPRequest) -> HTTPFields {
        guard request.headerFields[.origin] != nil else { return [:] }
        var headers: HTTPFields = [.vary: "Origin"]
        if let origin = allowedOrigin(request) {
            headers[.accessControlAllowOrigin] = origin
            headers[.accessControlExposeHeaders] = Self.exposeHeaders
        }
        return headers
    }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard request.headers[.origin] != nil else { return try await next(request, context) }
        let origin = allowedOrigin(request.head)
        if request.method == .options, request.headers[.accessControlRequestMethod] != nil {
            var headers: HTTPFields = [.vary: "Origin"]
            if let origin {
                headers[.accessControlAllowOrigin] = origin
                headers[.accessControlAllowMethods] = allowMethods
                headers[.accessControlAllowHeaders] = Self.allowHeaders
                headers[.accessControlMaxAge] = "600"
            }
            return Response(status: .noContent, headers: headers)
        }
        var response: Response
        do {
            response = try await next(request, context)
        } catch let error as any HTTPResponseError {
            response = try error.response(from: request, context: context)
        }
        for field in responseHeaders(for: request.head) where field.name != .vary { response.headers[field.name] = field.value }
        response.headers[values: .vary].append("Origin")
        return response
    }
}
