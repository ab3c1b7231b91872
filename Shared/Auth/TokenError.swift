/// Why a token was refused. Clients always get the same 401; the reason is logged.
public enum TokenError: Error, Equatable, Sendable {
    case malformed
    /// `none`, an algorithm Syncline does not accept, or one that does not match the key.
    case unsupportedAlgorithm
    /// The `kid` names no key of the identity provider's set.
    case unknownKey
    case badSignature
    case expired
    case notYetValid
    case wrongIssuer
    case wrongAudience
    case invalidClaims(String)
}
