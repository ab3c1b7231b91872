import SyncModels

/// What a token's claims must say, checked after its signature: `exp` required, `nbf`
/// honoured, both with a leeway for clocks that drift; `iss`/`aud` when configured (for
/// the identity provider's tokens); the user claim 1–128 characters without control
/// characters (a NUL would otherwise cut the id on its way to PostgreSQL).
public struct TokenPolicy: Sendable, Equatable {
    public var userClaim: String
    public var adminClaim: String
    public var adminValue: String
    /// The claim and value that give an admin the support scope: a space-separated
    /// string holding the value (as OAuth's `scope`) or an array holding it.
    public var supportClaim: String
    public var supportValue: String
    public var issuer: String?
    public var audience: String?
    public var leewaySeconds: Int64

    /// The leeway every service gives `exp` and `nbf`.
    public static let standardLeewaySeconds: Int64 = 60

    public init(
        userClaim: String = "sub", adminClaim: String = "role", adminValue: String = "admin",
        supportClaim: String = "scope", supportValue: String = "support", issuer: String? = nil, audience: String? = nil, leewaySeconds: Int64 = TokenPolicy.standardLeewaySeconds
    ) {
        self.userClaim = userClaim
        self.adminClaim = adminClaim
        self.adminValue = adminValue
        self.supportClaim = supportClaim
        self.supportValue = supportValue
        self.issuer = issuer
        self.audience = audience
        self.leewaySeconds = leewaySeconds
    }

    /// The claims of a token whose signature was verified. `checkIssuer` is false for
    /// HS256 tokens minted with `JWT_SECRET`, which name no issuer.
    public func claims(_ payload: [String: JSONValue], now: Int64, checkIssuer: Bool) throws(TokenError) -> Claims {
        guard let exp = payload["exp"].flatMap(Self.seconds) else { throw .invalidClaims("exp is required") }
        guard now < exp + leewaySeconds else { throw .expired }
        if let raw = payload["nbf"], !raw.isNull {
            guard let nbf = Self.seconds(raw) else { throw .invalidClaims("nbf must be a number") }
            guard now + leewaySeconds >= nbf else { throw .notYetValid }
        }
        if checkIssuer {
            if let issuer, payload["iss"]?.stringValue != issuer { throw .wrongIssuer }
            if let audience {
                let audiences: [String]
                switch payload["aud"] {
                case .string(let one)?: audiences = [one]
                case .array(let many)?: audiences = many.compactMap(\.stringValue)
                default: audiences = []
                }
                guard audiences.contains(audience) else { throw .wrongAudience }
            }
        }
        guard let user = payload[userClaim]?.stringValue, (1...Limits.maxUserIDLength).contains(user.count),
              Names.isPlainText(user)
        else { throw .invalidClaims("\(userClaim) must be 1 to \(Limits.maxUserIDLength) characters without control characters") }
        let isAdmin: Bool
        switch payload[adminClaim] {
        case .string(let value)?: isAdmin = value == adminValue
        case .array(let values)?: isAdmin = values.contains(.string(adminValue))
        default: isAdmin = false
        }
        let isSupport: Bool
        switch payload[supportClaim] {
        case .string(let value)?: isSupport = value.split(separator: " ").contains(Substring(supportValue))
        case .array(let values)?: isSupport = values.contains(.string(supportValue))
        default: isSupport = false
        }
        let name = payload["name"]?.stringValue.flatMap { Names.isPlainText($0) && $0.count <= 200 ? $0 : nil }
        return Claims(sub: user, exp: exp, role: isAdmin ? "admin" : nil, name: name, scope: isSupport ? "support" : nil)
    }

    private static func seconds(_ value: JSONValue) -> Int64? {
        switch value {
        case .int(let number): return number
        case .double(let number) where number.isFinite && abs(number) < 1e15: return Int64(number)
        default: return nil
        }
    }
}
