import HTTPSupport
import Hummingbird
import NIOCore
import Persistence
import SyncModels

/// In front of the data API (`/v1/service/…`): the request's bearer token must be a service
/// token that is known and not revoked. The lookup and the audit log's line for the
/// request are one statement, so a revoked token is refused from its next request on and
/// no request goes unrecorded.
struct ServiceAuthenticationMiddleware: RouterMiddleware {
    let tokens: ServiceTokenStore

    func handle(
        _ request: Request, context: GatewayRequestContext, next: (Request, GatewayRequestContext) async throws -> Response
    ) async throws -> Response {
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else {
            throw APIError.unauthorized("A service token is required.", token: .missing)
        }
        let token = String(header.dropFirst("Bearer ".count))
        guard token.hasPrefix(ServicePrincipal.tokenPrefix), token.utf8.count <= 200 else {
            throw APIError.forbidden("The data API takes service tokens only (syncctl service-tokens create).")
        }
        let use = "\(request.method.rawValue) \(request.uri.path.prefix(512))"
        guard let service = try await tokens.authenticate(token: token, use: use) else {
            throw APIError.unauthorized("The service token is unknown or revoked.", token: .invalid)
        }
        var context = context
        context.service = service
        context.logger[metadataKey: "service.token_id"] = "\(service.id)"
        return try await next(request, context)
    }
}

/// The context of a data API route: the gateway's, with the service its token names.
struct ServiceRequestContext: ChildRequestContext {
    var coreContext: CoreRequestContextStorage
    let service: ServicePrincipal

    init(context: GatewayRequestContext) throws {
        guard let service = context.service else { throw APIError.unauthorized("A service token is required.", token: .missing) }
        coreContext = context.coreContext
        self.service = service
    }
}
