import JWTKit

/// Mints HS256 tokens signed with `JWT_SECRET` (`syncctl token`, the benchmarks, tests).
public struct TokenMinter: Sendable {
    private let keys: JWTKeyCollection

    public static let minimumSecretBytes = 32

    public init(secret: String) async throws(TokenError) {
        guard secret.utf8.count >= Self.minimumSecretBytes else {
            throw .invalidClaims("JWT_SECRET must be at least \(Self.minimumSecretBytes) bytes")
        }
        keys = await JWTKeyCollection().add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
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

    init(_ claims: Claims) {
        sub = claims.sub
        exp = claims.exp
        role = claims.role
        name = claims.name
    }

    func verify(using algorithm: some JWTAlgorithm) async throws {}
}
