/// The JSON shapes of the HTTP API, shared by the gateway, syncctl and tests.

public struct DeviceView: Codable, Sendable, Equatable {
    public var deviceID: String
    public var name: String
    public var platform: String
    public var pushURL: String?
    public var pushSecret: String?
    public var createdAt: String
    public var revokedAt: String?

    public init(deviceID: String, name: String, platform: String, pushURL: String?, pushSecret: String?, createdAt: String, revokedAt: String?) {
        self.deviceID = deviceID
        self.name = name
        self.platform = platform
        self.pushURL = pushURL
        self.pushSecret = pushSecret
        self.createdAt = createdAt
        self.revokedAt = revokedAt
    }

    enum CodingKeys: String, CodingKey {
        case deviceID = "device_id", name, platform, pushURL = "push_url", pushSecret = "push_secret"
        case createdAt = "created_at", revokedAt = "revoked_at"
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(deviceID, forKey: .deviceID)
        try container.encode(name, forKey: .name)
        try container.encode(platform, forKey: .platform)
        try container.encode(pushURL, forKey: .pushURL)
        try container.encodeIfPresent(pushSecret, forKey: .pushSecret)
        try container.encode(createdAt, forKey: .createdAt)
        try container.encode(revokedAt, forKey: .revokedAt)
    }
}

public struct DeviceList: Codable, Sendable {
    public var items: [DeviceView]
    public init(items: [DeviceView]) { self.items = items }
}

public enum JobStatus: String, Codable, Sendable {
    case queued, processing, retrying, succeeded, dead, discarded

    public var isTerminal: Bool { self == .succeeded || self == .dead || self == .discarded }
    /// The statuses of a job that may still be applied.
    public static let unfinished: [JobStatus] = [.queued, .processing, .retrying]
}

public struct AttemptView: Codable, Sendable, Equatable {
    public var attempt: Int
    public var startedAt: String?
    public var finishedAt: String?
    public var error: String?

    enum CodingKeys: String, CodingKey {
        case attempt, startedAt = "started_at", finishedAt = "finished_at", error
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(attempt, forKey: .attempt)
        try container.encode(startedAt, forKey: .startedAt)
        try container.encode(finishedAt, forKey: .finishedAt)
        try container.encode(error, forKey: .error)
    }
}

public struct JobView: Codable, Sendable {
    public var jobID: String
    public var status: JobStatus
    public var attempts: Int
    public var attemptLog: [AttemptView]
    public var createdAt: String
    public var finishedAt: String?
    public var lastError: String?
    public var checkpoint: String?
    public var results: [OpResult]
    /// The space the job wrote to.
    public var spaceID: String?
    /// The version of the app's rules that judged the job when it was applied (0: none).
    public var rulesVersion: Int64?

    public init(jobID: String, status: JobStatus, attempts: Int, attemptLog: [AttemptView], createdAt: String, finishedAt: String?, lastError: String?, checkpoint: String?, results: [OpResult], spaceID: String? = nil, rulesVersion: Int64? = nil) {
        self.spaceID = spaceID
        self.rulesVersion = rulesVersion
        self.jobID = jobID
        self.status = status
        self.attempts = attempts
        self.attemptLog = attemptLog
        self.createdAt = createdAt
        self.finishedAt = finishedAt
        self.lastError = lastError
        self.checkpoint = checkpoint
        self.results = results
    }

    enum CodingKeys: String, CodingKey {
        case jobID = "job_id", status, attempts, attemptLog = "attempt_log", createdAt = "created_at"
        case finishedAt = "finished_at", lastError = "last_error", checkpoint, results, spaceID = "space_id"
        case rulesVersion = "rules_version"
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(jobID, forKey: .jobID)
        try container.encode(status, forKey: .status)
        try container.encode(attempts, forKey: .attempts)
        try container.encode(attemptLog, forKey: .attemptLog)
        try container.encode(createdAt, forKey: .createdAt)
        try container.encode(finishedAt, forKey: .finishedAt)
        try container.encode(lastError, forKey: .lastError)
        try container.encode(checkpoint, forKey: .checkpoint)
        try container.encode(results, forKey: .results)
        try container.encode(spaceID, forKey: .spaceID)
        try container.encode(rulesVersion, forKey: .rulesVersion)
    }
}

public struct PushAccepted: Codable, Sendable {
    public var jobID: String
    public var status: JobStatus
    public var ops: Int

    public init(jobID: String, status: JobStatus, ops: Int) {
        self.jobID = jobID
        self.status = status
        self.ops = ops
    }

    enum CodingKeys: String, CodingKey { case jobID = "job_id", status, ops }
}

/// One published record in the public listing. `author` is the publisher's
/// display name when known — never a user id.
public struct PublicItem: Codable, Sendable, Equatable {
    public var publicID: String
    public var collection: String
    public var title: String?
    public var description: String?
    public var tags: [String]
    public var language: String?
    public var author: String?
    public var publishedAt: String
    public var viewCount: Int64
    public var forkCount: Int64

    public init(
        publicID: String, collection: String, title: String?, description: String?, tags: [String], language: String?,
        author: String?, publishedAt: String, viewCount: Int64, forkCount: Int64
    ) {
        self.publicID = publicID
        self.collection = collection
        self.title = title
        self.description = description
        self.tags = tags
        self.language = language
        self.author = author
        self.publishedAt = publishedAt
        self.viewCount = viewCount
        self.forkCount = forkCount
    }

    enum CodingKeys: String, CodingKey {
        case publicID = "public_id", collection, title, description, tags, language, author
        case publishedAt = "published_at", viewCount = "view_count", forkCount = "fork_count"
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(publicID, forKey: .publicID)
        try container.encode(collection, forKey: .collection)
        try container.encode(title, forKey: .title)
        try container.encode(description, forKey: .description)
        try container.encode(tags, forKey: .tags)
        try container.encode(language, forKey: .language)
        try container.encode(author, forKey: .author)
        try container.encode(publishedAt, forKey: .publishedAt)
        try container.encode(viewCount, forKey: .viewCount)
        try container.encode(forkCount, forKey: .forkCount)
    }
}

public struct PublicList: Codable, Sendable {
    public var items: [PublicItem]
    public init(items: [PublicItem]) { self.items = items }
}

/// One published or unlisted record, read without auth.
public struct PublicRecord: Codable, Sendable, Equatable {
    public var publicID: String
    public var collection: String
    public var data: JSONValue
    public var author: String?
    public var publishedAt: String
    public var updatedAt: String
    public var viewCount: Int64
    public var forkCount: Int64
    public var canFork: Bool
    public var forkedFrom: String?
    /// The record's version: the ETag.
    public var version: Int64

    public init(
        publicID: String, collection: String, data: JSONValue, author: String?, publishedAt: String, updatedAt: String,
        viewCount: Int64, forkCount: Int64, canFork: Bool, forkedFrom: String?, version: Int64
    ) {
        self.publicID = publicID
        self.collection = collection
        self.data = data
        self.author = author
        self.publishedAt = publishedAt
        self.updatedAt = updatedAt
        self.viewCount = viewCount
        self.forkCount = forkCount
        self.canFork = canFork
        self.forkedFrom = forkedFrom
        self.version = version
    }

    enum CodingKeys: String, CodingKey {
        case publicID = "public_id", collection, data, author, publishedAt = "published_at", updatedAt = "updated_at"
        case viewCount = "view_count", forkCount = "fork_count", canFork = "can_fork", forkedFrom = "forked_from"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        publicID = try container.decode(String.self, forKey: .publicID)
        collection = try container.decode(String.self, forKey: .collection)
        data = try container.decode(JSONValue.self, forKey: .data)
        author = try container.decodeIfPresent(String.self, forKey: .author)
        publishedAt = try container.decode(String.self, forKey: .publishedAt)
        updatedAt = try container.decode(String.self, forKey: .updatedAt)
        viewCount = try container.decode(Int64.self, forKey: .viewCount)
        forkCount = try container.decode(Int64.self, forKey: .forkCount)
        canFork = try container.decode(Bool.self, forKey: .canFork)
        forkedFrom = try container.decodeIfPresent(String.self, forKey: .forkedFrom)
        version = 0
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(publicID, forKey: .publicID)
        try container.encode(collection, forKey: .collection)
        try container.encode(data, forKey: .data)
        try container.encode(author, forKey: .author)
        try container.encode(publishedAt, forKey: .publishedAt)
        try container.encode(updatedAt, forKey: .updatedAt)
        try container.encode(viewCount, forKey: .viewCount)
        try container.encode(forkCount, forKey: .forkCount)
        try container.encode(canFork, forKey: .canFork)
        try container.encode(forkedFrom, forKey: .forkedFrom)
    }
}

/// What a worker announces on `sync.events` when a job finished: fanout pokes the user's
/// other devices and tells the origin device about rejected, conflicting or dead jobs.
public struct JobEvent: Codable, Sendable, Equatable {
    public var userID: UserID
    public var deviceID: DeviceID
    public var jobID: JobID
    public var status: JobStatus
    public var checkpoint: String?
    /// Some op was rejected or conflicted: the device asks for the job's results (on the
    /// wire, `troubled`).
    public var hasRefusedOps: Bool
    /// The space the job wrote to (nil only in events from before spaces). `userID` is the
    /// member this event is for; `deviceID` the device that pushed.
    public var spaceID: SpaceID?

    public init(
        userID: UserID, deviceID: DeviceID, jobID: JobID, status: JobStatus, checkpoint: String?, hasRefusedOps: Bool,
        spaceID: SpaceID? = nil
    ) {
        self.userID = userID
        self.deviceID = deviceID
        self.jobID = jobID
        self.status = status
        self.checkpoint = checkpoint
        self.hasRefusedOps = hasRefusedOps
        self.spaceID = spaceID
    }

    enum CodingKeys: String, CodingKey {
        case userID = "user_id", deviceID = "device_id", jobID = "job_id", status, checkpoint, hasRefusedOps = "troubled", spaceID = "space_id"
    }
}

/// One webhook to deliver: a poke for `device_id` of `user_id` up to `cursor` of the
/// space `space_id`.
public struct WebhookDelivery: Codable, Sendable, Equatable {
    public var userID: UserID
    public var deviceID: DeviceID
    public var cursor: String
    public var jobID: JobID
    public var spaceID: SpaceID?

    public init(userID: UserID, deviceID: DeviceID, cursor: String, jobID: JobID, spaceID: SpaceID? = nil) {
        self.userID = userID
        self.deviceID = deviceID
        self.cursor = cursor
        self.jobID = jobID
        self.spaceID = spaceID
    }

    enum CodingKeys: String, CodingKey {
        case userID = "user_id", deviceID = "device_id", cursor, jobID = "job_id", spaceID = "space_id"
    }

    /// The body POSTed to the device's push_url, naming the space that changed.
    public var pokeBody: [UInt8] {
        var fields: [String: JSONValue] = [
            "type": .string("poke"), "user_id": .string(userID.text), "device_id": .string(deviceID.description),
            "cursor": .string(cursor),
        ]
        if let spaceID { fields["space_id"] = .string(spaceID.description) }
        return JSONWriter.bytes(.object(fields))
    }
}

/// Announced on `sync.events` when a device is revoked, or every device of a user when the
/// account is deleted (`deviceID` nil): every fanout replica ends those streams at once.
public struct DeviceRevokedEvent: Codable, Sendable, Equatable {
    public var type = "device_revoked"
    public var userID: UserID
    public var deviceID: DeviceID?

    public init(userID: UserID, deviceID: DeviceID?) {
        self.userID = userID
        self.deviceID = deviceID
    }

    enum CodingKeys: String, CodingKey { case type, userID = "user_id", deviceID = "device_id" }
}

/// Announced on `sync.events` when a user's membership of a space ends (removed, left, or
/// the space deleted): every fanout replica ends that user's streams narrowed to the space.
public struct SpaceLeftEvent: Codable, Sendable, Equatable {
    public var type = "space_left"
    public var userID: UserID
    public var spaceID: SpaceID

    public init(userID: UserID, spaceID: SpaceID) {
        self.userID = userID
        self.spaceID = spaceID
    }

    enum CodingKeys: String, CodingKey { case type, userID = "user_id", spaceID = "space_id" }
}

/// How far an account deletion got (`GET /v1/me/deletion`).
public struct AccountDeletionView: Codable, Sendable, Equatable {
    public var status: String
    public var requestedAt: String
    public var finishedAt: String?

    public init(status: String, requestedAt: String, finishedAt: String?) {
        self.status = status
        self.requestedAt = requestedAt
        self.finishedAt = finishedAt
    }

    enum CodingKeys: String, CodingKey { case status, requestedAt = "requested_at", finishedAt = "finished_at" }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(status, forKey: .status)
        try container.encode(requestedAt, forKey: .requestedAt)
        try container.encode(finishedAt, forKey: .finishedAt)
    }
}
