import Foundation
import HTTPSupport
import Hummingbird
import Operations
import ServiceSupport
import SyncModels

/// The operators' side of the app's backend, behind `AdminOnlyMiddleware`: service tokens
/// (`/v1/admin/service-tokens…`) and record feeds (`/v1/admin/feeds…`).
struct BackendAdminRoutes: Sendable {
    let access: BackendAccess

    var routes: RouteCollection<SignedInRequestContext> {
        let routes = RouteCollection(context: SignedInRequestContext.self)
        routes.post("/v1/admin/service-tokens", use: createToken)
        routes.get("/v1/admin/service-tokens", use: listTokens)
        routes.delete("/v1/admin/service-tokens/:token_id", use: revokeToken)
        routes.post("/v1/admin/feeds", use: createFeed)
        routes.get("/v1/admin/feeds", use: listFeeds)
        routes.delete("/v1/admin/feeds/:feed_id", use: deleteFeed)
        routes.post("/v1/admin/feeds/:feed_id/replay", use: replayFeed)
        return routes
    }

    struct Items<Item: Encodable>: Encodable {
        let items: [Item]
    }

    /// A list of strings, or absent (null); anything else is a 422 naming the member.
    static func strings(_ value: JSONValue?, _ name: String) throws -> [String]? {
        guard let value, !value.isNull else { return nil }
        guard let items = value.arrayValue, let texts = Optional(items.compactMap(\.stringValue)), texts.count == items.count else {
            throw APIError.unprocessable("\(name) must be an array of strings.")
        }
        return texts
    }

    static func flag(_ value: JSONValue?, _ name: String) throws -> Bool {
        guard let value, !value.isNull else { return false }
        guard let flag = value.boolValue else { throw APIError.unprocessable("\(name) must be true or false.") }
        return flag
    }

    /// Runs an operation whose refusal is the caller's mistake: a 422 saying what.
    static func refusing<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let refusal as BackendAccess.Refusal {
            throw APIError.unprocessable("\(refusal.description.prefix(1).uppercased())\(refusal.description.dropFirst()).")
        }
    }

    @Sendable func createToken(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let body = try await request.jsonObject()
        guard let name = body["name"]?.stringValue else { throw APIError.unprocessable("name must be a string.") }
        let spaces = try Self.strings(body["spaces"], "spaces"), readOnly = try Self.flag(body["read_only"], "read_only")
        let created = try await Self.refusing {
            try await access.createToken(name: name, spaces: spaces, readOnly: readOnly, actor: context.user.text)
        }
        return try jsonResponse(created, status: .created)
    }

    @Sendable func listTokens(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        try jsonResponse(Items(items: try await access.listTokens()))
    }

    @Sendable func revokeToken(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        guard let id = ServiceTokenID(try context.parameters.require("token_id")),
              try await access.revokeToken(id, actor: context.user.text)
        else { throw APIError.notFound("No such service token.") }
        return Response(status: .noContent)
    }

    @Sendable func createFeed(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let body = try await request.jsonObject()
        guard let url = body["url"]?.stringValue else { throw APIError.unprocessable("url must be a string.") }
        let spaces = try Self.strings(body["spaces"], "spaces"), collections = try Self.strings(body["collections"], "collections")
        let fromStart = try Self.flag(body["from_start"], "from_start")
        let created = try await Self.refusing {
            try await access.createFeed(url: url, spaces: spaces, collections: collections, fromStart: fromStart, actor: context.user.text)
        }
        return try jsonResponse(created, status: .created)
    }

    @Sendable func listFeeds(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        try jsonResponse(Items(items: try await access.listFeeds()))
    }

    @Sendable func deleteFeed(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        guard let id = FeedID(try context.parameters.require("feed_id")), try await access.deleteFeed(id, actor: context.user.text) else {
            throw APIError.notFound("No such feed.")
        }
        return Response(status: .noContent)
    }

    /// `{"space_id"?, "from_version"?}`: delivers again from that version (or from where
    /// each position is, starting stopped ones again).
    @Sendable func replayFeed(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let body = try await request.jsonObject()
        var space: SpaceID?
        if let value = body["space_id"], !value.isNull {
            guard let text = value.stringValue, let id = SpaceID(text) else { throw APIError.unprocessable("space_id must be a space id.") }
            space = id
        }
        var version: Int64?
        if let value = body["from_version"], !value.isNull {
            guard let number = value.intValue, number >= 0 else { throw APIError.unprocessable("from_version must be a version, 0 or more.") }
            version = number
        }
        guard let id = FeedID(try context.parameters.require("feed_id")),
              let moved = try await Self.refusing({ try await access.replayFeed(id, space: space, from: version, actor: context.user.text) })
        else { throw APIError.notFound("No such feed.") }
        struct Replayed: Encodable { let positions: Int }
        return try jsonResponse(Replayed(positions: moved))
    }
}
