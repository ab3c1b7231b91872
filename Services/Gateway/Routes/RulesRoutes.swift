import Foundation
import HTTPSupport
import HTTPTypes
import Hummingbird
import Operations
import ServiceSupport
import SyncModels

/// The app's rules: `GET /v1/rules` for every signed-in client (what they refuse at the
/// call), and for admins `GET|PUT /v1/admin/rules` and `GET /v1/admin/rules/history`.
struct RulesRoutes: Sendable {
    let book: RulesBook
    /// What this gateway judges by; refreshed at once after a document is applied here.
    let cache: RulesCache

    /// A rules document is a page or two of text; a megabyte is far beyond any real one.
    static let maxDocumentBytes = 1 << 20

    var routes: RouteCollection<SignedInRequestContext> {
        let routes = RouteCollection(context: SignedInRequestContext.self)
        routes.get("/v1/rules", use: current)
        return routes
    }

    /// For the group behind `AdminOnlyMiddleware`.
    var adminRoutes: RouteCollection<SignedInRequestContext> {
        let routes = RouteCollection(context: SignedInRequestContext.self)
        routes.get("/v1/admin/rules", use: adminCurrent)
        routes.put("/v1/admin/rules", use: apply)
        routes.get("/v1/admin/rules/history", use: history)
        return routes
    }

    /// The current version, with a strong ETag: a client polling with `If-None-Match`
    /// gets 304 until it changes.
    @Sendable func current(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let rules = try await cache.rules()
        var headers = HTTPFields()
        headers[.eTag] = rules.entityTag
        headers[.cacheControl] = "no-cache"
        if request.ifNoneMatch(rules.entityTag) { return Response(status: .notModified, headers: headers) }
        return Self.document(rules.clientDocument, headers: headers)
    }

    /// The stored current version, read from the database (not this gateway's copy).
    @Sendable func adminCurrent(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let rules = try await book.current()
        var headers = HTTPFields()
        headers[.eTag] = rules.entityTag
        headers[.cacheControl] = "no-store"
        return Self.document(rules.versionedDocument, headers: headers)
    }

    @Sendable func apply(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let format = try Self.format(of: request)
        let body = try await request.body.collect(upTo: Self.maxDocumentBytes)
        guard let text = String(validating: body.readableBytesView, as: UTF8.self) else {
            throw APIError.badRequest("The rules document must be UTF-8 text.")
        }
        let version: Int64
        do {
            version = try await book.apply(text, format: format, actor: context.user.text)
        } catch let error as RulesError {
            var problem = APIError.unprocessable("The rules document was refused: \(error). The stored version is unchanged.")
            problem.pointer = error.path
            throw problem
        }
        // This gateway follows at once; the others within RULES_REFRESH.
        try? await cache.refresh()
        return try jsonResponse(AppliedRules(version: version))
    }

    @Sendable func history(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let limit = try request.integerParameter("limit", in: 1...1000, default: 50)
        return try jsonResponse(RulesHistory(items: try await book.history(limit: limit)))
    }

    /// JSON unless the body says it is YAML; anything else is refused.
    static func format(of request: Request) throws -> RulesBook.Format {
        guard let type = request.headers[.contentType] else { return .json }
        let mediaType = type.split(separator: ";")[0].trimmingCharacters(in: .whitespaces).lowercased()
        switch mediaType {
        case "application/json": return .json
        case "application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml": return .yaml
        default:
            throw APIError(
                status: .unsupportedMediaType, code: .invalidRequest,
                detail: "The rules document must be application/json or application/yaml, not \(mediaType).")
        }
    }

    static func document(_ document: JSONValue, headers: HTTPFields) -> Response {
        var headers = headers
        headers[.contentType] = "application/json"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: JSONWriter.bytes(document))))
    }

    struct AppliedRules: Encodable {
        let version: Int64
    }

    struct RulesHistory: Encodable {
        let items: [RulesVersion]
    }
}
