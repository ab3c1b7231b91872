import Auth
import PQBridge
import Persistence
import ServiceSupport
import SyncModels

/// What an operator does for the app's backend — service tokens and record feeds — in one
/// place for the admin API and syncctl: the same checks, the same secrets, the same audit.
public struct BackendAccess: Sendable {
    let tokens: ServiceTokenStore
    let feeds: FeedStore
    /// `ALLOW_PRIVATE_WEBHOOKS`: a feed may then point into a private network.
    let allowPrivate: Bool

    public init(pool: PGPool, allowPrivate: Bool) {
        tokens = ServiceTokenStore(pool: pool)
        feeds = FeedStore(pool: pool)
        self.allowPrivate = allowPrivate
    }

    /// Why a request was refused, for the person who made it (a 422, or a usage error).
    public struct Refusal: Error, Sendable, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }

    static func spaces(_ texts: [String]?) throws(Refusal) -> [SpaceID]? {
        guard let texts else { return nil }
        guard !texts.isEmpty, texts.count <= 1000 else { throw Refusal("spaces must name 1 to 1,000 spaces (or leave it out for all)") }
        var ids: [SpaceID] = []
        for text in texts {
            guard let id = SpaceID(text) else { throw Refusal("spaces must be space ids (UUIDs); \(text.prefix(60)) is not one") }
            ids.append(id)
        }
        return ids
    }

    public func createToken(name: String, spaces: [String]?, readOnly: Bool, actor: String) async throws -> CreatedServiceToken {
        guard (1...100).contains(name.unicodeScalars.count), Names.isPlainText(name) else {
            throw Refusal("name must be 1 to 100 characters of text")
        }
        let token = ServicePrincipal.tokenPrefix + Secrets.random()
        guard let view = try await tokens.create(
            token: token, name: name, spaces: try Self.spaces(spaces), readOnly: readOnly, actor: actor)
        else { throw Refusal("a space named does not exist") }
        return CreatedServiceToken(token: token, serviceToken: view)
    }

    public func listTokens() async throws -> [ServiceTokenView] { try await tokens.list() }

    public func revokeToken(_ id: ServiceTokenID, actor: String) async throws -> Bool {
        try await tokens.revoke(id: id, actor: actor)
    }

    public func createFeed(
        url: String, spaces: [String]?, collections: [String]?, fromStart: Bool, actor: String
    ) async throws -> CreatedFeed {
        if let problem = WebhookAddresses.problem(with: url, allowPrivate: allowPrivate) { throw Refusal("url \(problem)") }
        if let collections {
            guard !collections.isEmpty, collections.count <= 100, collections.allSatisfy(Names.isValidCollection) else {
                throw Refusal("collections must name 1 to 100 collections (or leave it out for all)")
            }
        }
        let secret = Secrets.random()
        guard let feed = try await feeds.create(
            url: url, secret: secret, spaces: try Self.spaces(spaces), collections: collections, fromStart: fromStart, actor: actor)
        else { throw Refusal("a space named does not exist") }
        return CreatedFeed(secret: secret, feed: feed)
    }

    public func listFeeds() async throws -> [FeedView] { try await feeds.list() }

    public func deleteFeed(_ id: FeedID, actor: String) async throws -> Bool { try await feeds.delete(id: id, actor: actor) }

    /// Nil when the feed is unknown; else how many positions moved.
    public func replayFeed(_ id: FeedID, space: SpaceID?, from version: Int64?, actor: String) async throws -> Int? {
        if let version, version < 0 { throw Refusal("from must be a version, 0 or more") }
        return try await feeds.replay(id: id, space: space, from: version, actor: actor)
    }
}
