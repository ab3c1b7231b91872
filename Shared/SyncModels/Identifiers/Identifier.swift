import Foundation

/// The id of one kind of thing the server names with a UUID — a device, a space, a job:
/// read from text in any case, written in lowercase (on the wire, in logs, in the order ops
/// are sorted by), and never mistaken for another kind's id.
public struct Identifier<Kind>: Hashable, Sendable, Comparable, CustomStringConvertible {
    public let uuid: UUID

    public init(_ uuid: UUID) { self.uuid = uuid }

    /// The id `text` names, in any case; nil when it is not a UUID.
    public init?(_ text: some StringProtocol) {
        guard let canonical = Names.canonicalUUID(String(text)), let uuid = UUID(uuidString: canonical) else { return nil }
        self.uuid = uuid
    }

    /// A new id.
    public static func random() -> Self { Self(UUID()) }

    public var description: String { uuid.uuidString.lowercased() }

    /// The order of the lowercase text, without making it: hex digits sort as their values
    /// and the dashes stand at the same places, so the bytes' order is the text's (and
    /// PostgreSQL's order of `uuid`s).
    public static func < (lhs: Self, rhs: Self) -> Bool {
        withUnsafeBytes(of: lhs.uuid.uuid) { left in
            withUnsafeBytes(of: rhs.uuid.uuid) { right in left.lexicographicallyPrecedes(right) }
        }
    }
}

extension Identifier: Codable {
    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let id = Self(text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not a UUID: \(text)"))
        }
        self = id
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

public enum DeviceKind {}
/// A device's id (`device_id`): one per install of a client, registered by the user.
public typealias DeviceID = Identifier<DeviceKind>

public enum SpaceKind {}
/// A space's id (`space_id`): a user's personal space or a shared one.
public typealias SpaceID = Identifier<SpaceKind>

public enum JobKind {}
/// A job's id (`job_id`): one accepted push, applied by a worker.
public typealias JobID = Identifier<JobKind>

public enum DeadLetterKind {}
/// A dead letter's id (`dead_letter_id`): its job's id, or one derived from the message
/// that named no job.
public typealias DeadLetterID = Identifier<DeadLetterKind>

public enum ServiceTokenKind {}
/// A service token's id (`token_id`): the app's backend speaking through one token.
public typealias ServiceTokenID = Identifier<ServiceTokenKind>

public enum FeedKind {}
/// A record feed's id (`feed_id`).
public typealias FeedID = Identifier<FeedKind>
