import JWTKit

/// Mints HS256 tokens signed with `JWT_SECRET` (`syncctl token`, the benchmarks, tests).
public struct TokenMinter: Sendable {
    private let keys: JWTKeyCollection

    public static let minimumSecretBytes = 32

    public init(secret: String) async throws(TokenError) {
        keys = try await Self.hmacKeys(secret: secret)
    }

    /// The HS256 key of `JWT_SECRET`, for minting and verifying alike: the one place the
    /// secret's minimum length is enforced.
    static func hmacKeys(secret: String) async throws(TokenError) -> JWTKeyCollection {
        guard secret.utf8.count >= minimumSecretBytes else {
            throw .invalidClaims("JWT_SECRET must be at least \(minimumSecretBytes) bytes")
        }
        return await JWTKeyCollection().add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
    }

    public func sign(_ claims: Claims) async throws -> String {
        try await keys.sign(MintedClaims(claims))
    }
}

/// `Claims` as a jwt-kit payload.
struct MintedClaims: JWTPayload {
    let sub: String
    let exp: Int64
    let role: String?
    let name: String?
    let scope: String?

    init(_ claims: Claims) {
        sub = claims.sub
        exp = claims.exp
        role = claims.role
        name = claims.name
        scope = claims.scope
    }

    func verify(using algorithm: some JWTAlgorithm) async throws {}
}
