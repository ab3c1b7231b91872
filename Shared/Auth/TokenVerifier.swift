import Foundation
import JWTKit
import SyncModels

/// Verifies bearer tokens: HS256 signed with `JWT_SECRET`, and tokens of the app's
/// identity provider signed by a key of its JWKS (RS256, ES256, EdDSA). Signatures are
/// checked by jwt-kit; the choice of key is made here, strictly: the header's `alg` must
/// be one Syncline accepts and match the type of the key its `kid` names. `none`, HMAC
/// keyed with a public key, a `kid` outside the set and unknown `crit` extensions are
/// refused; `jku`, `x5u` and `jwk` header parameters are never followed.
public struct TokenVerifier: Sendable {
    private let hmac: JWTKeyCollection?
    private let keySet: JWKSKeySet?
    public let policy: TokenPolicy
    private let verified = VerifiedTokens(capacity: 4_096)

    public init(secret: String?, keySet: JWKSKeySet?, policy: TokenPolicy = TokenPolicy()) async throws(TokenError) {
        hmac = if let secret { try await TokenMinter.hmacKeys(secret: secret) } else { nil }
        guard hmac != nil || keySet != nil else { throw .invalidClaims("JWT_SECRET or JWT_JWKS_URL is required") }
        self.keySet = keySet
        self.policy = policy
    }

    public func verify(_ token: String, now: Date = Date()) async throws(TokenError) -> Claims {
        let seconds = Int64(now.timeIntervalSince1970)
        if let known = verified.entry(for: token) {
            if let kid = known.providerKeyID {
                guard let keySet, await keySet.key(kid: kid) != nil else { throw .unknownKey }
            }
            return try policy.claims(known.fields, now: seconds, checkIssuer: known.providerKeyID != nil)
        }
        let header = try Self.header(of: token)
        let payload: RawPayload
        let providerKeyID: String?
        do {
            switch header.alg {
            case "HS256":
                guard let hmac else { throw TokenError.unsupportedAlgorithm }
                payload = try await hmac.verify(token, as: RawPayload.self)
                providerKeyID = nil
            case "RS256", "ES256", "EdDSA":
                guard let keySet, let kid = header.kid else { throw TokenError.unknownKey }
                guard let key = await keySet.key(kid: kid) else { throw TokenError.unknownKey }
                guard key.accepts(alg: header.alg) else { throw TokenError.unsupportedAlgorithm }
                payload = try await key.keys.verify(token, as: RawPayload.self)
                providerKeyID = kid
            default:
                throw TokenError.unsupportedAlgorithm
            }
        } catch let error as TokenError {
            throw error
        } catch let error as JWTError where error.errorType == .signatureVerificationFailed {
            throw .badSignature
        } catch {
            throw .malformed
        }
        verified.remember(token, VerifiedTokens.Entry(fields: payload.fields, providerKeyID: providerKeyID))
        return try policy.claims(payload.fields, now: seconds, checkIssuer: providerKeyID != nil)
    }

    struct Header {
        let alg: String
        let kid: String?
    }

    static func header(of token: String) throws(TokenError) -> Header {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[2].isEmpty, let data = Base64URL.decode(parts[0]),
              let fields = (try? JSONParser.parse(data))?.objectValue
        else { throw .malformed }
        guard let alg = fields["alg"]?.stringValue else { throw .malformed }
        // RFC 7515 §4.1.11: extensions marked critical that we do not understand are fatal.
        if let crit = fields["crit"], !crit.isNull { throw .unsupportedAlgorithm }
        let kid = fields["kid"]?.stringValue
        if let kid, !Names.isPlainText(kid) { throw .malformed }
        return Header(alg: alg, kid: kid)
    }
}

/// A payload read as plain JSON, so the user and admin claims can be configured.
struct RawPayload: JWTPayload {
    let fields: [String: JSONValue]

    init(from decoder: any Decoder) throws {
        fields = try decoder.singleValueContainer().decode([String: JSONValue].self)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(fields)
    }

    func verify(using algorithm: some JWTAlgorithm) async throws {}
}
