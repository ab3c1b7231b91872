import Auth
import Hummingbird
import Logging

/// Bearer-token authentication (HS256 only). Every failure is the same 401 to the client;
/// the reason goes to the log.
struct Authenticator: Sendable {
    let signer: JWTSigner

    func user(_ request: Request, context: some RequestContext) throws -> Claims {
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else {
            throw APIError.unauthorized("A bearer token is required.")
        }
        do {
            return try signer.verify(String(header.dropFirst("Bearer ".count)))
        } catch {
            context.logger.debug("token refused", metadata: ["reason": "\(error)"])
            throw APIError.unauthorized("The token is invalid or expired.")
        }
    }

    func admin(_ request: Request, context: some RequestContext) throws -> Claims {
        let claims = try user(request, context: context)
        guard claims.isAdmin else { throw APIError.forbidden("An admin token is required.") }
        return claims
    }
}
