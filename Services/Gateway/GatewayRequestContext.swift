import Auth
import HTTPSupport
import Hummingbird
import NIOCore
import SyncModels

/// The gateway's request context: Hummingbird's basic one plus the client's address, which
/// the public endpoints' rate limit is keyed by.
struct GatewayRequestContext: IdentifiedRequestContext, RemoteAddressRequestContext {
    var coreContext: CoreRequestContextStorage
    let remoteAddress: SocketAddress?
    /// The connection, for what a response needs of it beyond the writer (its `WriteGate`).
    let channel: any Channel
    /// Set by `AuthenticationMiddleware` in front of the signed-in routes.
    var identity: Claims?
    /// Set by `ServiceAuthenticationMiddleware` in front of the data API.
    var service: ServicePrincipal?

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
        channel = source.channel
    }

    /// The address a per-client limit counts against (the connection's peer: behind a
    /// proxy, configure the proxy to limit per client instead).
    var clientAddress: String { remoteAddress?.ipAddress ?? "unknown" }
}

/// The context of a route that requires a signed-in user: the gateway's, with the identity
/// its bearer token gives (which `AuthenticationMiddleware` checked before).
struct SignedInRequestContext: ChildRequestContext {
    var coreContext: CoreRequestContextStorage
    let channel: any Channel
    let identity: Claims

    init(context: GatewayRequestContext) throws {
        guard let identity = context.identity else { throw APIError.unauthorized("A bearer token is required.", token: .missing) }
        coreContext = context.coreContext
        channel = context.channel
        self.identity = identity
    }

    /// The signed-in user's id.
    var user: UserID { identity.user }
}

/// In front of the operators' routes: a signed-in user without the admin role gets 403.
struct AdminOnlyMiddleware: RouterMiddleware {
    func handle(
        _ request: Request, context: SignedInRequestContext, next: (Request, SignedInRequestContext) async throws -> Response
    ) async throws -> Response {
        guard context.identity.isAdmin else { throw APIError.forbidden("An admin token is required.") }
        return try await next(request, context)
    }
}
