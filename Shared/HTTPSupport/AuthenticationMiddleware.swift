import Auth
import Hummingbird

/// A request context that can carry the identity a verified bearer token gives.
public protocol IdentifiedRequestContext: RequestContext {
    var identity: Claims? { get set }
}

/// Verifies the request's bearer token before any handler behind it runs, and puts its
/// claims in the context. A missing, invalid or expired token is a 401 (`Authenticator`).
/// The routes behind it take a child context that requires the identity
/// (`ChildRequestContext`), so no handler can forget to ask.
public struct AuthenticationMiddleware<Context: IdentifiedRequestContext>: RouterMiddleware {
    let authenticator: Authenticator

    public init(_ authenticator: Authenticator) {
        self.authenticator = authenticator
    }

    public func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        var context = context
        context.identity = try await authenticator.user(request, context: context)
        return try await next(request, context)
    }
}
