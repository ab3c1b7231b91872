import Auth
import Crypto
import Foundation
import JWTKit
import SyncModels
import Testing
import _CryptoExtras
import TestSupport

/// The app's own sign-in: a test identity provider (its own RSA and EC keys, its JWKS on a
/// real HTTP server) whose tokens the gateway and fanout accept, rotate and cache.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct IdentityProviderTests {
    static let issuer = "https://id.test.example"
    static let audience = "com.example.sailing"

    /// One signing key of the provider and how it appears in its JWKS.
    struct SigningKey {
        let kid: String
        let keys: JWTKeyCollection
        let jwk: String
        let publicPEM: String?

        static func rsa(_ kid: String) async throws -> SigningKey {
            let key = try Insecure.RSA.PrivateKey(backing: _RSA.Signing.PrivateKey(keySize: .bits2048))
            let (n, e) = try key.publicKey.getKeyPrimitives()
            return SigningKey(
                kid: kid, keys: await JWTKeyCollection().add(rsa: key, digestAlgorithm: .sha256, kid: JWKIdentifier(string: kid)),
                jwk: #"{"kty":"RSA","use":"sig","alg":"RS256","kid":"\#(kid)","n":"\#(Base64URL.encode(n))","e":"\#(Base64URL.encode(e))"}"#,
                publicPEM: try key.publicKey.pemRepresentation)
        }

        static func ec(_ kid: String) async throws -> SigningKey {
            let key = ES256PrivateKey()
            let p = key.publicKey.parameters!
            return SigningKey(
                kid: kid, keys: await JWTKeyCollection().add(ecdsa: key, kid: JWKIdentifier(string: kid)),
                jwk: #"{"kty":"EC","crv":"P-256","kid":"\#(kid)","x":"\#(p.x)","y":"\#(p.y)"}"#, publicPEM: nil)
        }

        func token(_ user: String, _ overrides: [String: JSONValue] = [:]) async throws -> String {
            var claims: [String: JSONValue] = [
                "sub": .string(user), "iss": .string(IdentityProviderTests.issuer), "aud": .string(IdentityProviderTests.audience),
                "exp": .int(Int64(Date().timeIntervalSince1970) + 600), "iat": .int(Int64(Date().timeIntervalSince1970)),
            ]
            claims.merge(overrides) { $1 }
            return try await keys.sign(ProviderClaims(fields: claims), kid: JWKIdentifier(string: kid))
        }
    }

    struct ProviderClaims: JWTPayload {
        let fields: [String: JSONValue]
        init(fields: [String: JSONValue]) { self.fields = fields }
        init(from decoder: any Decoder) throws { fields = try decoder.singleValueContainer().decode([String: JSONValue].self) }
        func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            try container.encode(fields)
        }
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    static func publish(_ keys: [SigningKey], on server: StaticFileServer) throws {
        try server.write("jwks.json", #"{"keys":[\#(keys.map(\.jwk).joined(separator: ","))]}"#)
    }

    func b64(_ text: String) -> String { Base64URL.encode(Data(text.utf8)) }

    @Test func providerTokensAreAcceptedRotatedRefusedAndCached() async throws {
        let provider = try await StaticFileServer()
        defer { provider.stop() }
        let first = try await SigningKey.rsa("rsa-2026-1")
        let ec = try await SigningKey.ec("ec-2026-1")
        try Self.publish([first, ec], on: provider)
        let environment = [
            "JWT_JWKS_URL": "\(provider.base)/jwks.json", "JWT_ISSUER": Self.issuer, "JWT_AUDIENCE": Self.audience,
        ]
        try await InProcessStack.with(workers: 1, fanouts: 1, environment: environment) { stack in
            let api = stack.client
            let user = "apple-\(UUID().uuidString.prefix(8))"
            // Gateway and fanout accept the provider's RSA and EC tokens.
            let token = try await first.token(user)
            let device = try await api.registerDevice(token)
            #expect(try await api.request("GET", "/v1/devices", token: try await ec.token(user)).status == 200)
            let stream = try SSEClient(port: stack.fanoutPorts[0], path: "/v1/stream?device_id=\(device)&access_token=\(token)")
            defer { stream.close() }
            _ = try await stream.inbox.next("hello")
            // HS256 with JWT_SECRET keeps working beside the provider.
            #expect(try await api.request("GET", "/v1/devices", token: await E2E.token(user)).status == 200)

            // The provider rotates to a new key: Syncline follows without a restart, and
            // the key that left the set is no longer accepted.
            let second = try await SigningKey.rsa("rsa-2026-2")
            try Self.publish([second, ec], on: provider)
            let rotated = try await second.token(user)
            #expect(try await api.request("GET", "/v1/devices", token: rotated).status == 200)
            #expect(try await api.request("GET", "/v1/devices", token: token).status == 401)

            // Refusals, each a 401.
            let now = Int64(Date().timeIntervalSince1970)
            let stranger = try await SigningKey.rsa("rsa-not-in-set")
            let pem = try #require(second.publicPEM)
            let payload = #"{"sub":"\#(user)","iss":"\#(Self.issuer)","aud":"\#(Self.audience)","exp":\#(now + 600)}"#
            let hmacInput = b64(#"{"alg":"HS256","typ":"JWT","kid":"rsa-2026-2"}"#) + "." + b64(payload)
            let hmacWithPublicKey = hmacInput + "." + Base64URL.encode(Data(HMAC<SHA256>.authenticationCode(
                for: Data(hmacInput.utf8), using: SymmetricKey(data: Data(pem.utf8)))))
            let refused: [(String, String)] = [
                ("key not in the set", try await stranger.token(user)),
                ("wrong issuer", try await second.token(user, ["iss": .string("https://evil.example")])),
                ("wrong audience", try await second.token(user, ["aud": .string("com.example.other")])),
                ("expired", try await second.token(user, ["exp": .int(now - 120)])),
                ("not yet valid", try await second.token(user, ["nbf": .int(now + 300)])),
                ("HS256 keyed with the RSA public key", hmacWithPublicKey),
                ("alg none", b64(#"{"alg":"none","kid":"rsa-2026-2"}"#) + "." + b64(payload) + "."),
            ]
            for (name, bad) in refused {
                let answer = try await api.request("GET", "/v1/devices", token: bad)
                #expect(answer.status == 401, "\(name): \(answer.status) \(answer.text)")
                #expect(answer.json["code"] as? String == "unauthorized", "\(name)")
                let streamAnswer = try await APIClient(base: "http://127.0.0.1:\(stack.fanoutPorts[0])")
                    .request("GET", "/v1/stream?device_id=\(device)", token: bad, headers: ["Accept": "text/event-stream"])
                #expect(streamAnswer.status == 401, "fanout, \(name): \(streamAnswer.status)")
            }

            // The provider goes away: the cached keys keep working.
            provider.stop()
            #expect(try await api.request("GET", "/v1/devices", token: rotated).status == 200)
            #expect(try await api.request("GET", "/v1/devices", token: try await ec.token(user)).status == 200)
        }
    }
}
