import Auth
import Hummingbird
import Logging

/// Bearer-token authentication (used by `AuthenticationMiddleware`). Every failure is the
/// same 401 to the client; the reason goes to the log.
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
            throw APIError.unauthorized("A bearer token is required.")
        }
        do {
            return try await verifier.verify(token)
        } catch {
            context.logger.debug("token refused", metadata: ["reason": "\(error)"])
            throw APIError.unauthorized("The token is invalid or expired.")
        }
    }

}
