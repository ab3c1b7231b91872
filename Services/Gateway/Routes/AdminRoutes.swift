import Auth
import Foundation
import HTTPSupport
import Hummingbird
import Operations
import Persistence
import ServiceSupport
import SyncModels

/// The admin API: dead letters, bulk replay, audit log, queues, job rates, and
/// the `/admin` and `/admin/support` pages. Every endpoint needs a token with `role: admin`
/// (the pages themselves hold no data and need none).
struct AdminRoutes: Sendable {
    let office: DeadLetterOffice
    let page: String
    let supportPage: String

    /// The admin API, for the group behind `AdminOnlyMiddleware`.
    var routes: RouteCollection<SignedInRequestContext> {
        let routes = RouteCollection(context: SignedInRequestContext.self)
        routes.get("/v1/admin/dead-letters", use: list)
        routes.post("/v1/admin/dead-letters/replay", use: bulkReplay)
        routes.get("/v1/admin/dead-letters/:job_id", use: show)
        routes.post("/v1/admin/dead-letters/:job_id/replay", use: replay)
        routes.post("/v1/admin/dead-letters/:job_id/discard", use: discard)
        routes.get("/v1/admin/audit", use: audit)
        routes.get("/v1/admin/queues", use: queues)
        routes.get("/v1/admin/job-rates", use: jobRates)
        return routes
    }

    /// The pages, which hold no data and need no token.
    var pageRoutes: RouteCollection<GatewayRequestContext> {
        let routes = RouteCollection(context: GatewayRequestContext.self)
        routes.get("/admin") { _, _ in Self.html(page) }
        routes.get("/admin/support") { _, _ in Self.html(supportPage) }
        return routes
    }

    /// A page with the security headers the file routes send.
    static func html(_ page: String) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "text/html; charset=utf-8"
        headers[.cacheControl] = "no-store"
        headers[.xContentTypeOptions] = "nosniff"
        headers[.referrerPolicy] = "no-referrer"
        // No other origin may frame it (clickjacking a replay or discard button).
        headers[.contentSecurityPolicy] =
            "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; frame-ancestors 'none'"
        headers[.xFrameOptions] = "DENY"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: page)))
    }

    @Sendable func list(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let query = request.uri.queryParameters
        let queue = query["queue"].map(String.init) ?? "sync"
        guard ["sync", "notify", "feed"].contains(queue) else { throw APIError.badRequest("queue must be sync, notify or feed.") }
        let limit = try request.integerParameter("limit", in: 1...500, default: 50)
        var cursor: PageCursor?
        if let text = query["cursor"].map(String.init) {
            guard let parsed = PageCursor(text: text) else { throw APIError.badRequest("cursor must be a next_cursor from an earlier page.") }
            cursor = parsed
        }
        let filter = try Self.filter(
            userID: query["user_id"].map(String.init), spaceID: query["space_id"].map(String.init),
            reason: query["reason"].map(String.init), deadBefore: query["dead_before"].map(String.init), deadAfter: query["dead_after"].map(String.init),
            invalid: APIError.badRequest)
        return try jsonResponse(try await office.list(queue: queue, filter: filter, limit: limit, cursor: cursor))
    }

    /// The dead letter a path names; an id that is no UUID names none.
    private func deadLetter(_ context: SignedInRequestContext, notFound: String) throws -> DeadLetterID {
        guard let id = DeadLetterID(try context.parameters.require("job_id")) else { throw APIError.notFound(notFound) }
        return id
    }

    @Sendable func show(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        guard let detail = try await office.detail(id: try deadLetter(context, notFound: "No such dead letter.")) else {
            throw APIError.notFound("No such dead letter.")
        }
        return try jsonResponse(detail)
    }

    @Sendable func replay(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        switch try await office.replay(id: try deadLetter(context, notFound: "No dead job with this id."), actor: context.user.text) {
        case .replayed(let jobID):
            return try jsonResponse(DeadLetterAction(jobID: jobID, status: .queued), status: .accepted)
        case .notFound:
            throw APIError.notFound("No dead job with this id.")
        case .namesNoJob:
            throw APIError(status: .conflict, code: .invalidRequest, detail: "This dead letter names no job that could run again; discard it.")
        }
    }

    @Sendable func discard(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let id = try deadLetter(context, notFound: "No such dead letter.")
        guard try await office.discard(id: id, actor: context.user.text) else { throw APIError.notFound("No such dead letter.") }
        return try jsonResponse(DeadLetterAction(jobID: id.description, status: .discarded))
    }

    @Sendable func bulkReplay(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let fields = try await request.jsonObject()
        // A filter field given must say something: a non-empty string (null or "" would
        // silently widen the selection).
        func text(_ name: String) throws -> String? {
            guard let value = fields[name] else { return nil }
            guard let string = value.stringValue, !string.isEmpty else {
                throw APIError.unprocessable("\(name) must be a non-empty string.")
            }
            return string
        }
        var dryRun = false
        if let value = fields["dry_run"], !value.isNull {
            guard let flag = value.boolValue else { throw APIError.unprocessable("dry_run must be a boolean.") }
            dryRun = flag
        }
        let filter = try Self.filter(
            userID: try text("user_id"), spaceID: try text("space_id"), reason: try text("reason"),
            deadBefore: try text("dead_before"),
            deadAfter: try text("dead_after"), invalid: APIError.unprocessable)
        guard !filter.isEmpty else {
            throw APIError.unprocessable("A filter is required: user_id, space_id, reason, dead_before or dead_after (dry_run is no filter).")
        }
        return try jsonResponse(try await office.bulkReplay(filter: filter, dryRun: dryRun, actor: context.user.text))
    }

    @Sendable func audit(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let limit = try request.integerParameter("limit", in: 1...1000, default: 100)
        return try jsonResponse(AuditLog(items: try await office.auditLog(limit: limit)))
    }

    @Sendable func queues(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        return try jsonResponse(QueueList(items: try await office.queues()))
    }

    @Sendable func jobRates(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let minutes = try request.integerParameter("minutes", in: 1...240, default: 15)
        return try jsonResponse(try await office.jobRates(minutes: minutes))
    }

    static func filter(
        userID: String?, spaceID: String?, reason: String?, deadBefore: String?, deadAfter: String?,
        invalid: (String) -> APIError
    ) throws -> DeadLetterFilter {
        func nonEmpty(_ text: String?) -> String? { text.flatMap { $0.isEmpty ? nil : $0 } }
        func time(_ name: String, _ text: String?) throws -> String? {
            guard let text else { return nil }
            guard let canonical = RFC3339.canonicalUTC(text) else {
                throw invalid("\(name) must be an RFC 3339 time such as 2026-11-22T10:00:00Z.")
            }
            return canonical
        }
        for (name, value) in [("user_id", userID), ("reason", reason)] {
            if let value, !Names.isPlainText(value) { throw invalid("\(name) must not contain control characters.") }
        }
        var space: String?
        if let spaceID {
            guard let id = Names.canonicalUUID(spaceID) else { throw invalid("space_id must be a space's id.") }
            space = id
        }
        return DeadLetterFilter(
            userID: nonEmpty(userID), spaceID: space, reason: nonEmpty(reason),
            deadBefore: try time("dead_before", deadBefore), deadAfter: try time("dead_after", deadAfter))
    }
}
