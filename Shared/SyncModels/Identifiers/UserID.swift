/// A user's id: the user claim of the tokens they sign in with (`sub` by default), as the
/// identity provider wrote it. Opaque text, compared exactly (unlike the server's UUIDs);
/// the token's check bounds its length and characters before one is made.
public struct UserID: Hashable, Sendable, Comparable, CustomStringConvertible, Codable, ExpressibleByStringLiteral {
    public let text: String

    public init(_ text: String) { self.text = text }

    public init(stringLiteral text: String) { self.text = text }

    public var description: String { text }

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.text < rhs.text }

    public init(from decoder: any Decoder) throws {
        text = try decoder.singleValueContainer().decode(String.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(text)
    }
}
