/// "Why doesn't device D have record R": the facts the support console gathers about a
/// device, a space and a record, and the one answer they give — the first cause that holds,
/// in the order a support engineer would check them.
public struct MissingRecordFacts: Sendable, Equatable {
    /// The record's collection.
    public var collection: String
    public var deviceRevoked: Bool
    /// The device's user is a member of the space.
    public var isMember: Bool
    /// The record's row: nil when the space holds none (never written, refused, or purged).
    public var record: Record?
    public var purgeHorizon: Int64
    /// The newest job within retention that named the record, with its op's result.
    public var newestJob: Job?
    /// Where the device's pulls of the space reached, if it pulled it since the console
    /// began keeping track.
    public var cursor: Cursor?
    public var openStreams: Int

    public struct Record: Sendable, Equatable {
        public var version: Int64
        public var deleted: Bool
        public init(version: Int64, deleted: Bool) {
            self.version = version
            self.deleted = deleted
        }
    }

    public struct Job: Sendable, Equatable {
        public var jobID: String
        /// `queued`, `processing`, `retrying`, `succeeded`, `dead`, `discarded`.
        public var status: String
        public var opType: String
        /// The op's result once applied: `applied`, `superseded`, `rejected`, …
        public var result: String?
        public var reason: String?
        public var rule: String?
        public init(jobID: String, status: String, opType: String, result: String?, reason: String? = nil, rule: String? = nil) {
            self.jobID = jobID
            self.status = status
            self.opType = opType
            self.result = result
            self.reason = reason
            self.rule = rule
        }
    }

    public struct Cursor: Sendable, Equatable {
        public var cursor: Int64
        /// The pull's collections, nil for all.
        public var collections: [String]?
        public var pulledAt: String
        public init(cursor: Int64, collections: [String]?, pulledAt: String) {
            self.cursor = cursor
            self.collections = collections
            self.pulledAt = pulledAt
        }
    }

    public init(
        collection: String, deviceRevoked: Bool, isMember: Bool, record: Record?, purgeHorizon: Int64, newestJob: Job?, cursor: Cursor?,
        openStreams: Int
    ) {
        self.collection = collection
        self.deviceRevoked = deviceRevoked
        self.isMember = isMember
        self.record = record
        self.purgeHorizon = purgeHorizon
        self.newestJob = newestJob
        self.cursor = cursor
        self.openStreams = openStreams
    }
}

/// The answer: a cause (stable, for scripts and tests) and a sentence for people.
public struct MissingRecordAnswer: Sendable, Equatable {
    public enum Cause: String, Sendable, CaseIterable {
        case deviceRevoked = "device_revoked"
        case notAMember = "not_a_member"
        case jobQueued = "job_queued"
        case refused
        case superseded
        case purged
        case deleted
        case neverWritten = "never_written"
        case notYetPulled = "not_yet_pulled"
        /// The device pulled past the record's version: it has it.
        case delivered
    }

    public var cause: Cause
    public var detail: String

    public init(cause: Cause, detail: String) {
        self.cause = cause
        self.detail = detail
    }

    /// The first cause that holds, in this order: the device (revoked), its user's
    /// membership, the newest write still waiting or refused or superseded, the record gone
    /// (purged, deleted, never written), then the device's pulls.
    public init(_ facts: MissingRecordFacts) {
        if facts.deviceRevoked {
            self.init(cause: .deviceRevoked, detail: "The device was revoked: it can no longer pull or stream; sign in again on it.")
            return
        }
        if !facts.isMember {
            self.init(cause: .notAMember, detail: "The device's user is not a member of the space (never was, or was removed).")
            return
        }
        if let job = facts.newestJob {
            switch job.status {
            case "queued", "processing", "retrying":
                self.init(
                    cause: .jobQueued,
                    detail: "The newest write to the record (job \(job.jobID)) is still \(job.status): no worker has applied it yet.")
                return
            case "dead", "discarded":
                self.init(
                    cause: .refused,
                    detail: "The newest write to the record (job \(job.jobID)) was \(job.status == "dead" ? "dead-lettered" : "discarded") and never applied.")
                return
            default:
                break
            }
            switch job.result {
            case "rejected", "conflict":
                let why = [job.reason.map { "reason \($0)" }, job.rule.map { "rule \($0)" }].compactMap { $0 }.joined(separator: ", ")
                self.init(
                    cause: .refused,
                    detail: "The newest write to the record (job \(job.jobID)) was \(job.result ?? "rejected")\(why.isEmpty ? "" : " (\(why))"): the server refused it.")
                return
            case "superseded":
                self.init(
                    cause: .superseded,
                    detail: "The newest write to the record (job \(job.jobID)) was superseded: the record holds a newer write, which the device shows instead.")
                return
            default:
                break
            }
        }
        guard let record = facts.record else {
            if facts.newestJob?.opType == "delete" {
                self.init(
                    cause: .purged,
                    detail: "The record was deleted (job \(facts.newestJob?.jobID ?? "")) and its tombstone purged: the space's purge horizon is \(facts.purgeHorizon).")
            } else if facts.purgeHorizon > 0 {
                self.init(
                    cause: .neverWritten,
                    detail: "The space holds no such record and no job kept names it: it was never written, or was deleted and purged longer ago than jobs are kept.")
            } else {
                self.init(cause: .neverWritten, detail: "The space holds no such record, and no job kept names it.")
            }
            return
        }
        if let cursor = facts.cursor, cursor.cursor < facts.purgeHorizon {
            self.init(
                cause: .purged,
                detail: "The device's cursor (\(cursor.cursor)) is behind the space's purge horizon (\(facts.purgeHorizon)): its next pull is refused as too old and it pulls the space again from the start.")
            return
        }
        if record.deleted {
            self.init(cause: .deleted, detail: "The record was deleted (version \(record.version)); the device shows it deleted once it pulls that far.")
            return
        }
        let streams = facts.openStreams == 0
            ? "It has no open stream, so it learns of changes only when the app syncs."
            : "It has \(facts.openStreams) open stream\(facts.openStreams == 1 ? "" : "s"), so a change pokes it at once."
        guard let cursor = facts.cursor else {
            self.init(cause: .notYetPulled, detail: "The device has not pulled the space since the server began keeping track. \(streams)")
            return
        }
        if let collections = cursor.collections, !collections.isEmpty, !collections.contains(facts.collection) {
            self.init(
                cause: .notYetPulled,
                detail: "The device's pulls of the space ask only for \(collections.joined(separator: ", ")). \(streams)")
            return
        }
        if cursor.cursor < record.version {
            self.init(
                cause: .notYetPulled,
                detail: "The device pulled to cursor \(cursor.cursor) at \(cursor.pulledAt); the record is at version \(record.version). \(streams)")
            return
        }
        self.init(
            cause: .delivered,
            detail: "The device pulled to cursor \(cursor.cursor) at \(cursor.pulledAt), past the record's version \(record.version): it has it. If the app does not show it, look at the app's query or a local edit set aside.")
    }
}
