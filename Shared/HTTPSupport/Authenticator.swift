import Auth
import Hummingbird
import Logging
import SyncModels

/// Bearer-token authentication (used by `AuthenticationMiddleware`). A failure is a 401
/// that says whether the token was missing, expired (its signature held) or invalid; the
/// reason it was invalid goes to the log.
public struct Authenticator: Sendable {
    let verifier: TokenVerifier
    /// Browsers cannot set headers on an EventSource or WebSocket: streams also take the
    /// token as an `access_token` query parameter.
    let allowQueryToken: Bool

    public init(verifier: TokenVerifier, allowQueryToken: Bool = false) {
        self.verifier = verifier
        self.allowQueryToken = allowQueryToken
    }

    public func user(_ request: Request, context: some RequestContext) async throws -> Claims {
        let token: String
        if let header = request.headers[.authorization], header.hasPrefix("Bearer ") {
            token = String(header.dropFirst("Bearer ".count))
        } else if allowQueryToken, let query = request.uri.queryParameters["access_token"], !query.isEmpty {
            token = String(query)
        } else {
            throw APIError.unauthorized("A bearer token is required.", token: .missing)
        }
        if token.hasPrefix(ServicePrincipal.tokenPrefix) {
            throw APIError.forbidden("A service token is accepted only by the data API (/v1/service/…).")
        }
        let claims: Claims
        do {
            claims = try await verifier.verify(token)
        } catch .expired {
            throw APIError.unauthorized("The token expired.", token: .expired)
        } catch {
            context.logger.debug("token refused", metadata: ["reason": "\(error)"])
            throw APIError.unauthorized("The token is invalid.", token: .invalid)
        }
        // Ids of that form are the app's backend's: no user may speak as one.
        guard !claims.sub.hasPrefix(ServicePrincipal.userPrefix) else {
            throw APIError.forbidden("A user id may not start with \"\(ServicePrincipal.userPrefix)\".")
        }
        return claims
    }

}
