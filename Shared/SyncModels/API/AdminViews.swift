/// The JSON shapes of the admin API, shared by the gateway, syncctl and tests.

/// One dead letter in a list.
public struct DeadLetterItem: Codable, Sendable, Equatable {
    /// The job's id; for a message that names no job, an id derived from its body.
    public var jobID: String
    public var queue: String
    public var userID: String?
    public var deviceID: String?
    /// The space the job wrote to (null for a message that names no job).
    public var spaceID: String?
    public var attempts: Int
    public var reason: String
    public var lastError: String?
    public var deadAt: String
    public var ops: Int

    public init(jobID: String, queue: String, userID: String?, deviceID: String?, spaceID: String? = nil, attempts: Int, reason: String, lastError: String?, deadAt: String, ops: Int) {
        self.jobID = jobID
        self.queue = queue
        self.userID = userID
        self.deviceID = deviceID
        self.spaceID = spaceID
        self.attempts = attempts
        self.reason = reason
        self.lastError = lastError
        self.deadAt = deadAt
        self.ops = ops
    }

    enum CodingKeys: String, CodingKey {
        case jobID = "job_id", queue, userID = "user_id", deviceID = "device_id", spaceID = "space_id", attempts, reason
        case lastError = "last_error", deadAt = "dead_at", ops
    }

    // Keys stay when their value is null: the shape never changes with the data.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(jobID, forKey: .jobID)
        try container.encode(queue, forKey: .queue)
        try container.encode(userID, forKey: .userID)
        try container.encode(deviceID, forKey: .deviceID)
        try container.encode(spaceID, forKey: .spaceID)
        try container.encode(attempts, forKey: .attempts)
        try container.encode(reason, forKey: .reason)
        try container.encode(lastError, forKey: .lastError)
        try container.encode(deadAt, forKey: .deadAt)
        try container.encode(ops, forKey: .ops)
    }
}

public typealias DeadLetterPage = Page<DeadLetterItem>

/// One dead letter with what an operator needs to decide: the message as received, the
/// job's ops decoded, and every attempt with its error.
public struct DeadLetterDetail: Codable, Sendable {
    public var item: DeadLetterItem
    public var message: String
    public var payload: JSONValue?
    public var jobStatus: JobStatus?
    public var attemptLog: [AttemptView]

    public init(item: DeadLetterItem, message: String, payload: JSONValue?, jobStatus: JobStatus?, attemptLog: [AttemptView]) {
        self.item = item
        self.message = message
        self.payload = payload
        self.jobStatus = jobStatus
        self.attemptLog = attemptLog
    }

    enum CodingKeys: String, CodingKey {
        case message, payload, jobStatus = "job_status", attemptLog = "attempt_log"
    }

    public init(from decoder: any Decoder) throws {
        item = try DeadLetterItem(from: decoder)
        let container = try decoder.container(keyedBy: CodingKeys.self)
        message = try container.decode(String.self, forKey: .message)
        payload = try container.decodeIfPresent(JSONValue.self, forKey: .payload)
        jobStatus = try container.decodeIfPresent(JobStatus.self, forKey: .jobStatus)
        attemptLog = try container.decode([AttemptView].self, forKey: .attemptLog)
    }

    public func encode(to encoder: any Encoder) throws {
        try item.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(message, forKey: .message)
        try container.encode(payload, forKey: .payload)
        try container.encode(jobStatus, forKey: .jobStatus)
        try container.encode(attemptLog, forKey: .attemptLog)
    }
}

/// Which dead letters a bulk action or a list takes.
public struct DeadLetterFilter: Codable, Sendable, Equatable {
    public var userID: String?
    public var spaceID: String?
    public var reason: String?
    /// RFC 3339.
    public var deadBefore: String?
    public var deadAfter: String?

    public init(userID: String? = nil, spaceID: String? = nil, reason: String? = nil, deadBefore: String? = nil, deadAfter: String? = nil) {
        self.userID = userID
        self.spaceID = spaceID
        self.reason = reason
        self.deadBefore = deadBefore
        self.deadAfter = deadAfter
    }

    public var isEmpty: Bool { userID == nil && spaceID == nil && reason == nil && deadBefore == nil && deadAfter == nil }

    enum CodingKeys: String, CodingKey {
        case userID = "user_id", spaceID = "space_id", reason, deadBefore = "dead_before", deadAfter = "dead_after"
    }
}

public struct BulkReplayRequest: Codable, Sendable {
    public var filter: DeadLetterFilter
    public var dryRun: Bool

    public init(filter: DeadLetterFilter, dryRun: Bool) {
        self.filter = filter
        self.dryRun = dryRun
    }

    enum CodingKeys: String, CodingKey { case dryRun = "dry_run" }

    public init(from decoder: any Decoder) throws {
        filter = try DeadLetterFilter(from: decoder)
        dryRun = try decoder.container(keyedBy: CodingKeys.self).decodeIfPresent(Bool.self, forKey: .dryRun) ?? false
    }

    public func encode(to encoder: any Encoder) throws {
        try filter.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(dryRun, forKey: .dryRun)
    }
}

public struct BulkReplayResult: Codable, Sendable, Equatable {
    public var matched: Int
    public var replayed: Int
    public init(matched: Int, replayed: Int) {
        self.matched = matched
        self.replayed = replayed
    }
}

/// The answer to replaying or discarding one dead letter.
public struct DeadLetterAction: Codable, Sendable, Equatable {
    public var jobID: String
    public var status: JobStatus?
    public init(jobID: String, status: JobStatus?) {
        self.jobID = jobID
        self.status = status
    }
    enum CodingKeys: String, CodingKey { case jobID = "job_id", status }
}

public struct AuditEntry: Codable, Sendable, Equatable {
    public var at: String
    public var actor: String
    public var action: String
    public var target: String?
    /// The user whose data the action looked at or changed.
    public var subject: String?
    public var filter: DeadLetterFilter?
    public var count: Int

    public init(
        at: String, actor: String, action: String, target: String?, subject: String? = nil, filter: DeadLetterFilter?, count: Int
    ) {
        self.at = at
        self.actor = actor
        self.action = action
        self.target = target
        self.subject = subject
        self.filter = filter
        self.count = count
    }

    enum CodingKeys: String, CodingKey { case at, actor, action, target, subject, filter, count }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(at, forKey: .at)
        try container.encode(actor, forKey: .actor)
        try container.encode(action, forKey: .action)
        try container.encode(target, forKey: .target)
        try container.encode(subject, forKey: .subject)
        try container.encode(filter, forKey: .filter)
        try container.encode(count, forKey: .count)
    }
}

public struct AuditLog: Codable, Sendable {
    public var items: [AuditEntry]
    public init(items: [AuditEntry]) { self.items = items }
}

public struct QueueView: Codable, Sendable, Equatable {
    public var name: String
    public var messages: Int
    public var consumers: Int
    public init(name: String, messages: Int, consumers: Int) {
        self.name = name
        self.messages = messages
        self.consumers = consumers
    }
}

public struct QueueList: Codable, Sendable {
    public var items: [QueueView]
    public init(items: [QueueView]) { self.items = items }
}

/// Jobs finished per minute, newest minute last, for the admin page.
public struct JobRates: Codable, Sendable {
    public struct Minute: Codable, Sendable, Equatable {
        public var minute: String
        public var succeeded: Int
        public var dead: Int
        public init(minute: String, succeeded: Int, dead: Int) {
            self.minute = minute
            self.succeeded = succeeded
            self.dead = dead
        }
    }

    public var minutes: [Minute]
    public var unfinished: Int
    public var oldestUnfinishedAgeSeconds: Double

    public init(minutes: [Minute], unfinished: Int, oldestUnfinishedAgeSeconds: Double) {
        self.minutes = minutes
        self.unfinished = unfinished
        self.oldestUnfinishedAgeSeconds = oldestUnfinishedAgeSeconds
    }

    enum CodingKeys: String, CodingKey {
        case minutes, unfinished, oldestUnfinishedAgeSeconds = "oldest_unfinished_age_seconds"
    }
}
