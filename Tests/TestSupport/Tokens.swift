import Auth
import Foundation

/// Tokens signed with the services' HS256 secret, as the tests' users sign in.
public enum Tokens {
    /// `JWT_SECRET`, or the secret `scripts/test` sets.
    public static let secret = ProcessInfo.processInfo.environment["JWT_SECRET"] ?? "syncline-test-secret-0123456789abcdef"

    /// A token for `user`, valid for an hour (or `seconds`); with `admin`, it carries the
    /// admin role, with `support` the support scope.
    public static func make(
        _ user: String, admin: Bool = false, support: Bool = false, name: String? = nil, seconds: Int64 = 3600
    ) async -> String {
        try! await TokenMinter(secret: secret).sign(Claims(
            sub: user, exp: Int64(Date().timeIntervalSince1970) + seconds, role: admin ? "admin" : nil, name: name,
            scope: support ? "support" : nil))
    }
}
