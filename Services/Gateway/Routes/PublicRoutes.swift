import Foundation
import HTTPSupport
import HTTPTypes
import Hummingbird
import Persistence
import ServiceSupport
import SyncModels

/// `GET /v1/public` and `GET /v1/public/{public_id}`: published records, no auth.
struct PublicRoutes: Sendable {
    let records: PublicStore
    let views: ViewCounter
    let limiter: RateLimiter
    let compression = ResponseCompression()

    var routes: RouteCollection<GatewayRequestContext> {
        let routes = RouteCollection(context: GatewayRequestContext.self)
        routes.get("/v1/public", use: list)
        routes.get("/v1/public/:public_id", use: show)
        return routes
    }

    @Sendable func list(_ request: Request, context: GatewayRequestContext) async throws -> Response {
        try limiter.check(context.clientAddress, limit: "public")
        var filter = PublicStore.Filter()
        if let text = request.uri.queryParameters["collection"].map(String.init) {
            guard Names.isValidCollection(text) else { throw APIError.badRequest("collection must be a collection name.") }
            filter.collection = text
        }
        filter.tag = try request.textParameter("tag", maxLength: Limits.maxTagLength)
        filter.query = try request.textParameter("q", maxLength: Limits.maxSearchLength)
        let limit = try request.integerParameter("limit", in: 1...100, default: 20)
        let offset = try request.integerParameter("offset", in: 0...100_000, default: 0)
        var items = try await records.list(filter, limit: limit, offset: offset)
        for index in items.indices { items[index].viewCount += Int64(views.pending(items[index].publicID)) }
        var headers = HTTPFields()
        headers[.cacheControl] = "public, max-age=5"
        return try compression.json(PublicList(items: items), for: request, headers: headers)
    }

    /// Answers with an ETag of the record's version; a matching If-None-Match gets 304.
    /// Otherwise counts a view — a reader's first in an hour — in memory, flushed in
    /// batches: reads never queue behind writes.
    @Sendable func show(_ request: Request, context: GatewayRequestContext) async throws -> Response {
        try limiter.check(context.clientAddress, limit: "public")
        let publicID = try context.parameters.require("public_id")
        guard Names.isValidPublicID(publicID), var record = try await records.record(publicID: publicID) else {
            throw APIError.notFound("No such public record.")
        }
        let etag = "W/\"\(record.version)\""
        var headers = HTTPFields()
        headers[.eTag] = etag
        headers[.cacheControl] = "no-cache"
        // A reader revalidating their copy has seen it already: a 304 counts no view.
        if request.ifNoneMatch(etag) {
            return Response(status: .notModified, headers: headers)
        }
        record.viewCount += Int64(views.count(publicID, reader: context.clientAddress))
        return try compression.json(record, for: request, headers: headers)
    }
}
