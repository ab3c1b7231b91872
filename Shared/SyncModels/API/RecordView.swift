/// A record as the API shows it: its data and, so that every device of the user can show
/// it, whether and how it is published and where it was forked from.
public struct RecordView: Codable, Sendable, Equatable {
    public var collection: String
    public var id: String
    public var version: Int64
    public var deleted: Bool
    public var data: [String: JSONValue]?
    public var updatedAt: String?
    public var updatedBy: String?
    /// The newest clock in the record's state, for the client's HLC receive rule.
    public var hlc: String?
    public var visibility: RecordState.PublicVisibility
    public var publicID: String?
    public var canFork: Bool
    public var publishedAt: String?
    public var forkedFrom: String?

    public init(
        collection: String, id: String, version: Int64, deleted: Bool,
        data: [String: JSONValue]?, updatedAt: String? = nil, updatedBy: String? = nil, hlc: String? = nil,
        visibility: RecordState.PublicVisibility = .private, publicID: String? = nil, canFork: Bool = false,
        publishedAt: String? = nil, forkedFrom: String? = nil
    ) {
        self.collection = collection
        self.id = id
        self.version = version
        self.deleted = deleted
        self.data = data
        self.updatedAt = updatedAt
        self.updatedBy = updatedBy
        self.hlc = hlc
        self.visibility = visibility
        self.publicID = publicID
        self.canFork = canFork
        self.publishedAt = publishedAt
        self.forkedFrom = forkedFrom
    }

    /// The field names of the wire shape: for the Codable forms, and for the pull's page
    /// writer and the client's page reader, which skip Codable for speed.
    public enum CodingKeys: String, CodingKey {
        case collection, id, version, deleted, data
        case updatedAt = "updated_at", updatedBy = "updated_by", hlc, visibility, publicID = "public_id"
        case canFork = "can_fork", publishedAt = "published_at", forkedFrom = "forked_from"
    }

    /// Conflict results stored before records carried visibility read as private.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        collection = try container.decode(String.self, forKey: .collection)
        id = try container.decode(String.self, forKey: .id)
        version = try container.decode(Int64.self, forKey: .version)
        deleted = try container.decode(Bool.self, forKey: .deleted)
        data = try container.decodeIfPresent([String: JSONValue].self, forKey: .data)
        updatedAt = try container.decodeIfPresent(String.self, forKey: .updatedAt)
        updatedBy = try container.decodeIfPresent(String.self, forKey: .updatedBy)
        hlc = try container.decodeIfPresent(String.self, forKey: .hlc)
        visibility = try container.decodeIfPresent(RecordState.PublicVisibility.self, forKey: .visibility) ?? .private
        publicID = try container.decodeIfPresent(String.self, forKey: .publicID)
        canFork = try container.decodeIfPresent(Bool.self, forKey: .canFork) ?? false
        publishedAt = try container.decodeIfPresent(String.self, forKey: .publishedAt)
        forkedFrom = try container.decodeIfPresent(String.self, forKey: .forkedFrom)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(collection, forKey: .collection)
        try container.encode(id, forKey: .id)
        try container.encode(version, forKey: .version)
        try container.encode(deleted, forKey: .deleted)
        try container.encode(data, forKey: .data)  // null for tombstones, never absent
        try container.encodeIfPresent(updatedAt, forKey: .updatedAt)
        try container.encodeIfPresent(updatedBy, forKey: .updatedBy)
        try container.encode(hlc, forKey: .hlc)
        try container.encode(visibility, forKey: .visibility)
        try container.encode(publicID, forKey: .publicID)
        try container.encode(canFork, forKey: .canFork)
        try container.encode(publishedAt, forKey: .publishedAt)
        try container.encode(forkedFrom, forKey: .forkedFrom)
    }
}

extension RecordView {
    /// A record from parsed JSON, in either form of a pull page (`PullPage`), without
    /// Codable (a client's initial sync reads many); nil when it is not one.
    public init?(json value: JSONValue) {
        typealias Key = CodingKeys
        guard let fields = value.objectValue, let collection = fields[Key.collection.rawValue]?.stringValue,
              let id = fields[Key.id.rawValue]?.stringValue, let version = fields[Key.version.rawValue]?.intValue
        else { return nil }
        // A compact page leaves `deleted` out when it is false.
        guard let deleted = fields[Key.deleted.rawValue].map(\.boolValue) ?? false else { return nil }
        self.init(
            collection: collection, id: id, version: version, deleted: deleted, data: fields[Key.data.rawValue]?.objectValue,
            updatedAt: fields[Key.updatedAt.rawValue]?.stringValue, updatedBy: fields[Key.updatedBy.rawValue]?.stringValue,
            hlc: fields[Key.hlc.rawValue]?.stringValue,
            visibility: fields[Key.visibility.rawValue]?.stringValue.flatMap(RecordState.PublicVisibility.init(rawValue:)) ?? .private,
            publicID: fields[Key.publicID.rawValue]?.stringValue, canFork: fields[Key.canFork.rawValue]?.boolValue ?? false,
            publishedAt: fields[Key.publishedAt.rawValue]?.stringValue, forkedFrom: fields[Key.forkedFrom.rawValue]?.stringValue)
    }
}
