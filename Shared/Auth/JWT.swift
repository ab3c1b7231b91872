import Crypto
import Foundation
import SyncModels

/// The claims Syncline reads from a token.
public struct Claims: Codable, Sendable, Equatable {
    public var sub: String
    public var exp: Int64
    public var role: String?
    public var name: String?

    public init(sub: String, exp: Int64, role: String? = nil, name: String? = nil) {
        self.sub = sub
        self.exp = exp
        self.role = role
        self.name = name
    }

    public var isAdmin: Bool { role == "admin" }
}

public enum TokenError: Error, Equatable, Sendable {
    case malformed
    case unsupportedAlgorithm
    case badSignature
    case expired
    case invalidClaims(String)
}

/// HS256 JSON Web Tokens — the only algorithm Syncline accepts. The header's `alg`
/// must be exactly `HS256`: `none` and every other algorithm are refused before the
/// signature is even looked at.
public struct JWTSigner: Sendable {
    private let key: SymmetricKey

    public static let minimumSecretBytes = 32

    public init(secret: String) throws(TokenError) {
        guard secret.utf8.count >= Self.minimumSecretBytes else {
            throw .invalidClaims("JWT_SECRET must be at least \(Self.minimumSecretBytes) bytes")
        }
        self.key = SymmetricKey(data: Data(secret.utf8))
    }

    public func sign(_ claims: Claims) throws -> String {
        let header = Base64URL.encode(Data(#"{"alg":"HS256","typ":"JWT"}"#.utf8))
        let payload = Base64URL.encode(try JSONEncoder().encode(claims))
        let signingInput = header + "." + payload
        let signature = HMAC<SHA256>.authenticationCode(for: Data(signingInput.utf8), using: key)
        return signingInput + "." + Base64URL.encode(Data(signature))
    }

    public func verify(_ token: String, now: Date = Date()) throws(TokenError) -> Claims {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3,
              let headerData = Base64URL.decode(parts[0]),
              let payloadData = Base64URL.decode(parts[1]),
              let signature = Base64URL.decode(parts[2])
        else { throw .malformed }
        struct Header: Decodable { let alg: String }
        guard let header = try? JSONDecoder().decode(Header.self, from: headerData) else { throw .malformed }
        guard header.alg == "HS256" else { throw .unsupportedAlgorithm }
        let signingInput = Data("\(parts[0]).\(parts[1])".utf8)
        guard HMAC<SHA256>.isValidAuthenticationCode(signature, authenticating: signingInput, using: key) else {
            throw .badSignature
        }
        guard let claims = try? JSONDecoder().decode(Claims.self, from: payloadData) else {
            throw .invalidClaims("sub and exp are required")
        }
        guard !claims.sub.isEmpty, claims.sub.utf8.count <= 128 else {
            throw .invalidClaims("sub must be 1 to 128 characters")
        }
        guard Int64(now.timeIntervalSince1970) < claims.exp else { throw .expired }
        return claims
    }
}

/// The signature webhooks carry (SPEC §6), and random secrets.
public enum Secrets {
    public static func random(bytes: Int = 32) -> String {
        let key = SymmetricKey(size: .init(bitCount: bytes * 8))
        return key.withUnsafeBytes { Hex.string($0) }
    }
}

public enum Digests {
    /// Lowercase hex SHA-256, e.g. to tell whether a retried request carries the same body.
    public static func sha256Hex(_ bytes: some DataProtocol) -> String {
        Hex.string(SHA256.hash(data: bytes))
    }
}

/// The signature on a webhook (SPEC §6): `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`.
public enum WebhookSignature {
    public static func header(secret: String, timestamp: Int64, body: [UInt8]) -> String {
        let signed = Array("\(timestamp).".utf8) + body
        let mac = HMAC<SHA256>.authenticationCode(for: signed, using: SymmetricKey(data: Array(secret.utf8)))
        return "t=\(timestamp),v1=" + Hex.string(mac)
    }

    /// Checks a header against the body; a receiver should also refuse old timestamps.
    public static func isValid(_ header: String, secret: String, body: [UInt8]) -> Bool {
        let parts = Dictionary(header.split(separator: ",").compactMap { part -> (String, String)? in
            let pair = part.split(separator: "=", maxSplits: 1)
            return pair.count == 2 ? (String(pair[0]), String(pair[1])) : nil
        }, uniquingKeysWith: { first, _ in first })
        guard let t = parts["t"].flatMap(Int64.init), parts["v1"] != nil else { return false }
        return self.header(secret: secret, timestamp: t, body: body) == header
    }
}
