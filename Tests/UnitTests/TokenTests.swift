import Auth
import Crypto
import _CryptoExtras
import Foundation
import JWTKit
import Logging
import SyncModels
import Testing
import TestSupport

/// Token verification without servers: HS256, and JWKS keys loaded from a file.
@Suite("Tokens")
struct TokenTests {
    static let secret = "unit-test-secret-unit-test-secret-0001"
    var now: Int64 { Int64(Date().timeIntervalSince1970) }

    func b64(_ text: String) -> String { Base64URL.encode(Data(text.utf8)) }

    func hs256(_ payload: String, secret: String = TokenTests.secret, header: String = #"{"alg":"HS256","typ":"JWT"}"#) -> String {
        let input = b64(header) + "." + b64(payload)
        let mac = HMAC<SHA256>.authenticationCode(for: Data(input.utf8), using: SymmetricKey(data: Data(secret.utf8)))
        return input + "." + Base64URL.encode(Data(mac))
    }

    func verifier(policy: TokenPolicy = TokenPolicy()) async throws -> TokenVerifier {
        try await TokenVerifier(secret: Self.secret, keySet: nil, policy: policy)
    }

    @Test func mintedTokensVerify() async throws {
        let token = try await TokenMinter(secret: Self.secret).sign(Claims(sub: "alice", exp: now + 60, role: "admin", name: "Alice"))
        let claims = try await verifier().verify(token)
        #expect(claims.sub == "alice" && claims.isAdmin && claims.name == "Alice")
    }

    @Test func expiryHasALeewayOfAMinute() async throws {
        #expect(try await verifier().verify(hs256(#"{"sub":"a","exp":\#(now - 30)}"#)).sub == "a")
        await #expect(throws: TokenError.expired) { try await verifier().verify(hs256(#"{"sub":"a","exp":\#(now - 61)}"#)) }
    }

    @Test func notBeforeIsHonoured() async throws {
        await #expect(throws: TokenError.notYetValid) {
            try await verifier().verify(hs256(#"{"sub":"a","exp":\#(now + 600),"nbf":\#(now + 120)}"#))
        }
        #expect(try await verifier().verify(hs256(#"{"sub":"a","exp":\#(now + 600),"nbf":\#(now + 30)}"#)).sub == "a")
    }

    @Test func expIsRequired() async throws {
        await #expect(throws: TokenError.self) { try await verifier().verify(hs256(#"{"sub":"a"}"#)) }
    }

    @Test func otherSecretAlgNoneAndGarbageAreRefused() async throws {
        let payload = #"{"sub":"a","exp":\#(now + 60)}"#
        await #expect(throws: TokenError.badSignature) {
            try await verifier().verify(hs256(payload, secret: "another-secret-another-secret-another-1"))
        }
        await #expect(throws: TokenError.self) { try await verifier().verify(b64(#"{"alg":"none"}"#) + "." + b64(payload) + ".") }
        await #expect(throws: TokenError.unsupportedAlgorithm) {
            try await verifier().verify(hs256(payload, header: #"{"alg":"HS512"}"#))
        }
        await #expect(throws: TokenError.malformed) { try await verifier().verify("not.a.jwt!") }
        await #expect(throws: TokenError.unsupportedAlgorithm) {
            try await verifier().verify(hs256(payload, header: #"{"alg":"HS256","crit":["exp"]}"#))
        }
    }

    @Test func userIdsWithControlCharactersAreRefused() async throws {
        await #expect(throws: TokenError.self) { try await verifier().verify(hs256(#"{"sub":"a\u0000b","exp":\#(now + 60)}"#)) }
        await #expect(throws: TokenError.self) { try await verifier().verify(hs256(#"{"sub":"a\nb","exp":\#(now + 60)}"#)) }
        await #expect(throws: TokenError.self) { try await verifier().verify(hs256(#"{"sub":"","exp":\#(now + 60)}"#)) }
        let long = String(repeating: "x", count: 129)
        await #expect(throws: TokenError.self) { try await verifier().verify(hs256(#"{"sub":"\#(long)","exp":\#(now + 60)}"#)) }
    }

    @Test func userAndAdminClaimsAreConfigurable() async throws {
        let policy = TokenPolicy(userClaim: "uid", adminClaim: "roles", adminValue: "ops")
        let claims = try await verifier(policy: policy).verify(hs256(#"{"uid":"u1","sub":"ignored","roles":["x","ops"],"exp":\#(now + 60)}"#))
        #expect(claims.sub == "u1" && claims.isAdmin)
        let plain = try await verifier(policy: policy).verify(hs256(#"{"uid":"u1","role":"admin","exp":\#(now + 60)}"#))
        #expect(!plain.isAdmin)
    }

    /// The support scope: OAuth's space-separated `scope` by default, or a configured claim
    /// holding an array; it counts only beside the admin role, and survives minting.
    @Test func theSupportScopeIsReadFromAConfigurableClaim() async throws {
        let plain = try await verifier().verify(hs256(#"{"sub":"s","role":"admin","scope":"read support write","exp":\#(now + 60)}"#))
        #expect(plain.isSupport)
        let narrow = try await verifier().verify(hs256(#"{"sub":"s","role":"admin","scope":"supporter","exp":\#(now + 60)}"#))
        #expect(!narrow.isSupport)
        let notAdmin = try await verifier().verify(hs256(#"{"sub":"s","scope":"support","exp":\#(now + 60)}"#))
        #expect(!notAdmin.isSupport && !notAdmin.isAdmin)
        let policy = TokenPolicy(supportClaim: "permissions", supportValue: "read:user-data")
        let custom = try await verifier(policy: policy).verify(
            hs256(#"{"sub":"s","role":"admin","permissions":["x","read:user-data"],"scope":"support","exp":\#(now + 60)}"#))
        #expect(custom.isSupport)
        let other = try await verifier(policy: policy).verify(hs256(#"{"sub":"s","role":"admin","scope":"support","exp":\#(now + 60)}"#))
        #expect(!other.isSupport)
        let minted = try await TokenMinter(secret: Self.secret).sign(Claims(sub: "s", exp: now + 60, role: "admin", scope: "support"))
        #expect(try await verifier().verify(minted).isSupport)
    }

    @Test func aServiceNeedsASecretOrAKeySet() async throws {
        await #expect(throws: TokenError.self) { try await TokenVerifier(secret: nil, keySet: nil) }
        await #expect(throws: TokenError.self) { try await TokenVerifier(secret: "short", keySet: nil) }
    }

    // MARK: JWKS from a file

    struct Provider {
        let rsa = try! Insecure.RSA.PrivateKey(backing: _RSA.Signing.PrivateKey(keySize: .bits2048))
        let ec = ES256PrivateKey()
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("jwks-\(UUID().uuidString).json").path

        func jwks() throws -> String {
            let (n, e) = try rsa.publicKey.getKeyPrimitives()
            let p = ec.publicKey.parameters!
            return """
                {"keys":[{"kty":"RSA","kid":"rsa-1","use":"sig","n":"\(Base64URL.encode(n))","e":"\(Base64URL.encode(e))"},
                {"kty":"EC","kid":"ec-1","crv":"P-256","x":"\(p.x)","y":"\(p.y)"}]}
                """
        }

        func sign(_ payload: [String: Any], kid: String, rsa useRSA: Bool = true) async throws -> String {
            let keys = JWTKeyCollection()
            if useRSA { await keys.add(rsa: rsa, digestAlgorithm: .sha256, kid: JWKIdentifier(string: kid)) }
            else { await keys.add(ecdsa: ec, kid: JWKIdentifier(string: kid)) }
            return try await keys.sign(Payload(fields: payload), kid: JWKIdentifier(string: kid))
        }
    }

    struct Payload: JWTPayload {
        let fields: [String: JSONValue]
        init(fields: [String: Any]) {
            let data = try! JSONSerialization.data(withJSONObject: fields)
            self.fields = try! JSONDecoder().decode([String: JSONValue].self, from: data)
        }
        init(from decoder: any Decoder) throws { fields = [:] }
        func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            try container.encode(fields)
        }
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    func providerVerifier(_ provider: Provider, issuer: String? = "https://id.example", audience: String? = "app") async throws -> TokenVerifier {
        try provider.jwks().write(toFile: provider.path, atomically: true, encoding: .utf8)
        let set = JWKSKeySet(source: .file(provider.path), logger: Logger(label: "test"))
        await set.refresh()
        return try await TokenVerifier(secret: Self.secret, keySet: set, policy: TokenPolicy(issuer: issuer, audience: audience))
    }

    @Test func providerTokensVerifyWithRSAAndEC() async throws {
        let provider = Provider()
        let verifier = try await providerVerifier(provider)
        let claims: [String: Any] = ["sub": "apple-user", "exp": now + 60, "iss": "https://id.example", "aud": "app"]
        #expect(try await verifier.verify(try await provider.sign(claims, kid: "rsa-1")).sub == "apple-user")
        #expect(try await verifier.verify(try await provider.sign(claims, kid: "ec-1", rsa: false)).sub == "apple-user")
        var audiences = claims
        audiences["aud"] = ["other", "app"]
        #expect(try await verifier.verify(try await provider.sign(audiences, kid: "rsa-1")).sub == "apple-user")
    }

    @Test func providerTokensAreCheckedStrictly() async throws {
        let provider = Provider()
        let verifier = try await providerVerifier(provider)
        let good: [String: Any] = ["sub": "u", "exp": now + 60, "iss": "https://id.example", "aud": "app"]
        func with(_ key: String, _ value: Any) -> [String: Any] { good.merging([key: value]) { $1 } }
        await #expect(throws: TokenError.wrongIssuer) { try await verifier.verify(try await provider.sign(with("iss", "https://evil"), kid: "rsa-1")) }
        await #expect(throws: TokenError.wrongAudience) { try await verifier.verify(try await provider.sign(with("aud", "other"), kid: "rsa-1")) }
        await #expect(throws: TokenError.unknownKey) { try await verifier.verify(try await provider.sign(good, kid: "rsa-2")) }
        // The EC key's kid on an RSA-signed token: alg RS256 does not match an EC key.
        await #expect(throws: TokenError.unsupportedAlgorithm) { try await verifier.verify(try await provider.sign(good, kid: "ec-1")) }
        // HS256 keyed with the RSA public key's PEM, naming the RSA kid: verified as HS256
        // with JWT_SECRET, never with the public key.
        let pem = try provider.rsa.publicKey.pemRepresentation
        let forged = hs256(try String(data: JSONSerialization.data(withJSONObject: good), encoding: .utf8)!, secret: pem,
                           header: #"{"alg":"HS256","kid":"rsa-1"}"#)
        await #expect(throws: TokenError.badSignature) { try await verifier.verify(forged) }
    }

    @Test func aTokenVerifiedBeforeIsStillCheckedForExpiry() async throws {
        let verifier = try await verifier()
        let token = hs256(#"{"sub":"a","exp":\#(now + 30)}"#)
        #expect(try await verifier.verify(token).sub == "a")
        #expect(try await verifier.verify(token).sub == "a", "the remembered signature")
        await #expect(throws: TokenError.expired) { try await verifier.verify(token, now: Date().addingTimeInterval(120)) }
        await #expect(throws: TokenError.badSignature) {
            try await verifier.verify(hs256(#"{"sub":"a","exp":\#(now + 30)}"#, secret: "another-secret-another-secret-another-1"))
        }
    }

    @Test func aProviderTokenIsRefusedOnceItsKeyLeavesTheSet() async throws {
        let provider = Provider()
        try provider.jwks().write(toFile: provider.path, atomically: true, encoding: .utf8)
        let set = JWKSKeySet(source: .file(provider.path), logger: Logger(label: "test"))
        await set.refresh()
        let verifier = try await TokenVerifier(
            secret: Self.secret, keySet: set, policy: TokenPolicy(issuer: "https://id.example", audience: "app"))
        let token = try await provider.sign(["sub": "u", "exp": now + 600, "iss": "https://id.example", "aud": "app"], kid: "rsa-1")
        #expect(try await verifier.verify(token).sub == "u")
        #expect(try await verifier.verify(token).sub == "u")
        // The provider rotates rsa-1 out of its set.
        let p = provider.ec.publicKey.parameters!
        try #"{"keys":[{"kty":"EC","kid":"ec-1","crv":"P-256","x":"\#(p.x)","y":"\#(p.y)"}]}"#
            .write(toFile: provider.path, atomically: true, encoding: .utf8)
        await set.refresh()
        await #expect(throws: TokenError.unknownKey) { try await verifier.verify(token) }
    }

    /// The hourly refresh of the provider's keys never holds up a token whose key is
    /// cached, however slow the provider: a server that answers once and then never again.
    @Test func aDueRefreshNeverHoldsUpATokenWithACachedKey() async throws {
        let provider = Provider()
        let server = try AnswerOnceServer(body: try provider.jwks())
        defer { server.close() }
        let clock = ManualClock()
        let set = JWKSKeySet(source: .url(URL(string: "http://127.0.0.1:\(server.port)/jwks")!), logger: Logger(label: "test"), now: clock.now)
        await set.refresh()
        let verifier = try await TokenVerifier(secret: Self.secret, keySet: set, policy: TokenPolicy(issuer: "https://id.example", audience: "app"))
        let claims: [String: Any] = ["sub": "u", "exp": now + 600, "iss": "https://id.example", "aud": "app"]
        #expect(try await verifier.verify(try await provider.sign(claims, kid: "rsa-1")).sub == "u")
        clock.advance(by: JWKSRefreshSchedule.refreshEvery + 1)  // the hourly refresh is due; the server stalls
        let started = Date()
        #expect(try await verifier.verify(try await provider.sign(claims.merging(["n": 1]) { $1 }, kid: "rsa-1")).sub == "u")
        #expect(Date().timeIntervalSince(started) < 1, "a request waited for the refresh")
    }

    /// A provider that answers at once and then sends its key set a byte a second: the
    /// fetch gives up at its deadline instead of holding the refresh as long as it pleases.
    @Test func aKeySetSentSlowlyIsGivenUpAtTheDeadline() async throws {
        let body = try Provider().jwks()
        let server = try ScriptedServer(answer: "HTTP/1.1 200 OK\r\nContent-Length: \(body.utf8.count)\r\n\r\n", trickle: body)
        defer { server.close() }
        let set = JWKSKeySet(
            source: .url(URL(string: "http://127.0.0.1:\(server.port)/jwks")!), logger: Logger(label: "test"), fetchDeadline: 1)
        let started = Date()
        await set.refresh()
        // The body, a byte a second, would take minutes (body.utf8.count seconds); beside
        // the other unit tests on a loaded machine the 1 s deadline has been seen to end
        // after 12 s, so the bound is the body's time, not the deadline's.
        #expect(Date().timeIntervalSince(started) < Double(body.utf8.count) / 4, "the refresh took \(Date().timeIntervalSince(started)) s")
        #expect(await !set.holds(kid: "rsa-1"))
    }

    /// A redirect is a failed fetch: the keys never come from another address than the one
    /// configured.
    @Test func aKeySetFetchFollowsNoRedirect() async throws {
        let body = try Provider().jwks()
        let elsewhere = try ScriptedServer(answer: "HTTP/1.1 200 OK\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)")
        let redirecting = try ScriptedServer(answer: "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:\(elsewhere.port)/jwks\r\nContent-Length: 0\r\n\r\n")
        defer { elsewhere.close(); redirecting.close() }
        let set = JWKSKeySet(source: .url(URL(string: "http://127.0.0.1:\(redirecting.port)/jwks")!), logger: Logger(label: "test"))
        await set.refresh()
        #expect(await !set.holds(kid: "rsa-1"))
        #expect(elsewhere.requests == 0)
    }

    @Test func refreshScheduleLimitsFetches() {
        var schedule = JWKSRefreshSchedule()
        let start = Date()
        func due(_ seconds: Double, kidKnown: Bool) -> Bool {
            schedule.shouldRefresh(now: start.addingTimeInterval(seconds), kidKnown: kidKnown)
        }
        #expect(due(0, kidKnown: false))
        schedule.attempted(at: start)
        #expect(!due(1, kidKnown: false))
        schedule.succeeded(at: start)
        #expect(due(5, kidKnown: false))  // an unknown kid
        #expect(!due(10, kidKnown: false))  // not again within 30 s
        #expect(due(36, kidKnown: false))
        #expect(!due(100, kidKnown: true))
        #expect(due(3601, kidKnown: true))  // hourly
    }
}

/// A clock a test moves by hand.
final class ManualClock: @unchecked Sendable {
    // @unchecked: `offset` is read and written under `lock`.
    private let lock = NSLock()
    private var offset: TimeInterval = 0
    func advance(by seconds: TimeInterval) { lock.withLock { offset += seconds } }
    var now: @Sendable () -> Date { { [self] in Date().addingTimeInterval(lock.withLock { offset }) } }
}

/// An HTTP server on loopback that answers its first request with `body` and then accepts
/// connections without ever answering them (a provider that went slow).
final class AnswerOnceServer: @unchecked Sendable {
    // @unchecked: `held` is touched only by the accepting thread until `close`.
    let port: Int
    private let listener: Int32
    private var held: [Int32] = []

    init(body: String) throws {
        guard let (listener, port) = Loopback.bind(), listen(listener, 16) == 0 else { throw POSIXError(.EADDRINUSE) }
        self.listener = listener
        self.port = port
        let response = Array("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)".utf8)
        Thread.detachNewThread { [self] in
            var answered = false
            while true {
                let connection = accept(listener, nil, nil)
                guard connection >= 0 else { return }
                guard !answered else {
                    held.append(connection)
                    continue
                }
                readRequestHead(connection)
                _ = response.withUnsafeBytes { write(connection, $0.baseAddress, $0.count) }
                Glibc.close(connection)
                answered = true
            }
        }
    }

    func close() {
        shutdown(listener, Int32(SHUT_RDWR))
        Glibc.close(listener)
    }
}

/// Reads a request's head from `connection` (up to its blank line, or until it ends).
private func readRequestHead(_ connection: Int32) {
    var request: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while !request.ends(with: Array("\r\n\r\n".utf8)) {
        let count = read(connection, &buffer, buffer.count)
        guard count > 0 else { break }
        request += buffer[0..<count]
    }
}

extension Array where Element == UInt8 {
    func ends(with suffix: [UInt8]) -> Bool { count >= suffix.count && Array(self[(count - suffix.count)...]) == suffix }
}

/// An HTTP server on loopback that answers every request with `answer`, then sends
/// `trickle` a byte a second, then closes.
final class ScriptedServer: @unchecked Sendable {
    // @unchecked: `requestCount` sits behind `lock`.
    let port: Int
    private let listener: Int32
    private let lock = NSLock()
    private var requestCount = 0

    var requests: Int { lock.withLock { requestCount } }

    init(answer: String, trickle: String = "") throws {
        guard let (listener, port) = Loopback.bind(), listen(listener, 16) == 0 else { throw POSIXError(.EADDRINUSE) }
        self.listener = listener
        self.port = port
        Thread.detachNewThread { [self] in
            while true {
                let connection = accept(listener, nil, nil)
                guard connection >= 0 else { return }
                lock.withLock { requestCount += 1 }
                Thread.detachNewThread {
                    readRequestHead(connection)
                    _ = Array(answer.utf8).withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    for byte in trickle.utf8 {
                        sleep(1)
                        var value = byte
                        guard send(connection, &value, 1, Int32(MSG_NOSIGNAL)) == 1 else { break }
                    }
                    Glibc.close(connection)
                }
            }
        }
    }

    func close() {
        shutdown(listener, Int32(SHUT_RDWR))
        Glibc.close(listener)
    }
}
