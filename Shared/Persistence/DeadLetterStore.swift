import Foundation
import PQBridge
import SyncModels

/// Dead letters as operators see them: one row per parked message, kept in step with the
/// job it names (a dead job has a row; replaying or discarding removes it).
public struct DeadLetterStore: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    /// What was recorded: the job's attempts and, when it names a job, its user and device.
    public struct Recorded: Sendable {
        public let attempts: Int
        public let userID: UserID?
        public let deviceID: DeviceID?
        public let spaceID: SpaceID?
    }

    /// Records a dead letter and, when the message names a job, marks that job dead with
    /// the error — one transaction. Returns nil, recording nothing, when the job already
    /// succeeded or was discarded (a late duplicate has nothing to park).
    /// `userID`/`deviceID` name whom a message that is not a job concerns (a webhook).
    public func record(
        id: String, queue: String = "sync", namedJobID: JobID?, reason: String, error: String, message: String,
        userID: UserID? = nil, deviceID: DeviceID? = nil, attempts: Int? = nil
    ) async throws -> Recorded? {
        try await pool.transaction { connection in
            struct Job: Decodable {
                let jobID: JobID, userID: UserID, deviceID: DeviceID, spaceID: SpaceID?, opCount: Int, attempts: Int, status: String
            }
            var job: Job?
            if let jobID = namedJobID {
                job = try connection.execute("""
                    SELECT job_id, user_id, device_id, space_id, op_count, attempts, status FROM jobs WHERE job_id = \(jobID) FOR UPDATE
                    """).first.map { try $0.decode(as: Job.self) }
                if let status = job?.status, status == JobStatus.succeeded.rawValue || status == JobStatus.discarded.rawValue {
                    return nil
                }
                if job != nil {
                    try connection.execute("""
                        UPDATE jobs SET status = \(JobStatus.dead), last_error = e.text, finished_at = clock_timestamp(),
                          attempt_log = \(sql: ApplyStore.closingLastAttempt(error: "e.text"))
                        FROM (SELECT \("\(reason): \(error)") AS text) e
                        WHERE job_id = \(jobID)
                        """)
                }
            }
            let recorded = Recorded(
                attempts: job?.attempts ?? attempts ?? 0, userID: job?.userID ?? userID,
                deviceID: job?.deviceID ?? deviceID, spaceID: job?.spaceID)
            try connection.execute("""
                INSERT INTO dead_letters
                  (dead_letter_id, queue, job_id, user_id, device_id, reason, last_error, attempts, op_count, payload, space_id)
                VALUES (\(id)::uuid, \(queue), \(job?.jobID)::uuid, \(recorded.userID), \(recorded.deviceID), \(reason), \(error),
                        \(Int32(recorded.attempts)), \(Int32(job?.opCount ?? 0)), \(message), \(recorded.spaceID))
                ON CONFLICT (dead_letter_id) DO UPDATE SET
                  reason = EXCLUDED.reason, last_error = EXCLUDED.last_error, attempts = EXCLUDED.attempts
                """)
            return recorded
        }
    }

    /// The columns of a list item, from table alias `d`, in `item`'s order, then its time
    /// exactly (for a page's cursor).
    static let itemColumns = """
        d.dead_letter_id, d.queue, d.user_id, d.device_id, d.space_id, d.attempts, d.reason, d.last_error,
        syncline_rfc3339(d.dead_at), d.op_count, d.dead_at
        """

    static func item(_ row: PGRows.Row) throws -> DeadLetterItem {
        let (id, queue, userID, deviceID, spaceID, attempts, reason, lastError, deadAt, ops) =
            try row.decode((String, String, String?, String?, String?, Int, String, String?, String, Int).self)
        return DeadLetterItem(
            jobID: id, queue: queue, userID: userID, deviceID: deviceID, spaceID: spaceID, attempts: attempts, reason: reason,
            lastError: lastError, deadAt: deadAt, ops: ops)
    }

    /// The SQL conditions of a filter, its parameters appended to `binds`.
    static func conditions(_ filter: DeadLetterFilter, _ binds: inout PGBinds) -> String {
        var conditions: [String] = []
        if let user = filter.userID { conditions.append("user_id = \(binds.append(user))") }
        if let reason = filter.reason { conditions.append("reason = \(binds.append(reason))") }
        if let before = filter.deadBefore { conditions.append("dead_at < \(binds.append(before))::timestamptz") }
        if let after = filter.deadAfter { conditions.append("dead_at > \(binds.append(after))::timestamptz") }
        if let space = filter.spaceID { conditions.append("space_id = \(binds.append(space))::uuid") }
        return conditions.isEmpty ? "true" : conditions.joined(separator: " AND ")
    }

    /// Newest first, `limit` at a time; `cursor` is the previous page's `next_cursor`.
    public func list(queue: String, filter: DeadLetterFilter, limit: Int, cursor: PageCursor?) async throws -> DeadLetterPage {
        var binds = PGBinds()
        var sql = "SELECT \(Self.itemColumns) FROM dead_letters d WHERE queue = \(binds.append(queue))"
        if let cursor {
            sql += " AND (dead_at, dead_letter_id) < (\(binds.append(cursor.time)), \(binds.append(cursor.id))::uuid)"
        }
        sql += " AND \(Self.conditions(filter, &binds)) ORDER BY dead_at DESC, dead_letter_id DESC LIMIT \(binds.append(limit + 1))"
        let rows = try await pool.execute(PGQuery(unsafeSQL: sql, binds: binds))
        let items = try rows.prefix(limit).map(Self.item)
        let next = try rows.count > limit
            ? PageCursor(rows[limit - 1].decode(PGTimestamp.self, at: 10), id: rows[limit - 1].decode(String.self, at: 0)).text
            : nil
        return DeadLetterPage(items: items, nextCursor: next)
    }

    /// One dead letter with its message, the job's ops and its attempts.
    public func detail(id: DeadLetterID) async throws -> DeadLetterDetail? {
        guard let row = try await pool.execute("""
            SELECT \(sql: Self.itemColumns), d.payload, j.ops, j.status, j.attempt_log
            FROM dead_letters d LEFT JOIN jobs j ON j.job_id = d.job_id
            WHERE d.dead_letter_id = \(id)
            """).first
        else { return nil }
        return DeadLetterDetail(
            item: try Self.item(row), message: try row.decode(String.self, at: 11),
            payload: try row.decode(PGJSON?.self, at: 12).map { try JSONParser.parse($0.text) },
            jobStatus: try row.decode(String?.self, at: 13).flatMap(JobStatus.init(rawValue:)),
            attemptLog: try row.decode(PGJSON?.self, at: 14).map { try JSONCoding.decode([AttemptView].self, from: $0.text) } ?? [])
    }

    public enum ReplayOutcome: Sendable, Equatable {
        /// The job is queued again with its attempts reset; publish it.
        case replayed(JobRef, traceID: String?)
        /// A webhook delivery: publish its message again (attempts reset), then `remove` it.
        case redeliver(id: DeadLetterID, message: String)
        /// A record feed's stopped position delivers again from where it stopped.
        case resumedFeed(feedID: String)
        case notFound
        /// The dead letter names no job that could run (not a job message, or an unknown job).
        case namesNoJob
    }

    /// Takes the dead letter off the list and queues its job again with attempts reset
    /// (unpublished, so the gateway's relay publishes it if the caller cannot).
    public func replay(id: DeadLetterID) async throws -> ReplayOutcome {
        try await pool.transaction { connection in
            guard let letter = try connection.execute(
                "SELECT job_id, queue, payload FROM dead_letters WHERE dead_letter_id = \(id) FOR UPDATE"
            ).first else { return .notFound }
            let (jobID, queue, payload) = try letter.decode((JobID?, String, String).self)
            if queue == "notify" {
                // Kept until the caller has published it again (`remove`): never lost in between.
                return .redeliver(id: id, message: payload)
            }
            if queue == "feed" {
                let letter = try JSONCoding.decode(FeedDeadLetter.self, from: payload)
                try Self.resumeFeed(connection, letter, skipping: false)
                try connection.execute("DELETE FROM dead_letters WHERE dead_letter_id = \(id)")
                return .resumedFeed(feedID: letter.feedID)
            }
            guard let jobID else { return .namesNoJob }
            let job = try connection.execute("""
                UPDATE jobs SET status = \(JobStatus.queued), attempts = 0, published_at = NULL, finished_at = NULL, last_error = NULL
                WHERE job_id = \(jobID) AND status = \(JobStatus.dead)
                RETURNING space_id, trace_id
                """).first
            try connection.execute("DELETE FROM dead_letters WHERE dead_letter_id = \(id)")
            guard let job else { return .notFound }
            let (space, traceID) = try job.decode((SpaceID, String?).self)
            return .replayed(JobRef(space: space, job: jobID), traceID: traceID)
        }
    }

    /// Starts a feed's stopped position again: from where it stopped, or (`skipping`, a
    /// discard) past the changes of the batch that failed.
    static func resumeFeed(_ connection: PGConnection, _ letter: FeedDeadLetter, skipping: Bool) throws {
        guard let feed = FeedID(letter.feedID), let space = SpaceID(letter.spaceID) else { return }
        try connection.execute("""
            UPDATE feed_positions SET dead = false, attempts = 0, next_attempt_at = clock_timestamp(), leased_until = NULL,
              last_error = NULL, version = CASE WHEN \(skipping) THEN greatest(version, \(letter.throughVersion)) ELSE version END
            WHERE feed_id = \(feed) AND space_id = \(space)
            """)
    }

    /// Takes a dead letter off the list once it has been sent again.
    public func remove(id: DeadLetterID) async throws {
        try await pool.execute("DELETE FROM dead_letters WHERE dead_letter_id = \(id)")
    }

    /// Takes the dead letter off the list for good; its job says `discarded`.
    public func discard(id: DeadLetterID) async throws -> Bool {
        try await pool.transaction { connection in
            guard let letter = try connection.execute(
                "DELETE FROM dead_letters WHERE dead_letter_id = \(id) RETURNING job_id, queue, payload"
            ).first else { return false }
            if try letter.decode(String.self, at: 1) == "feed" {
                try Self.resumeFeed(connection, try JSONCoding.decode(FeedDeadLetter.self, from: try letter.decode(String.self, at: 2)), skipping: true)
            }
            if let jobID = try letter.decode(UUID?.self, at: 0) {
                try connection.execute("""
                    UPDATE jobs SET status = \(JobStatus.discarded), finished_at = clock_timestamp()
                    WHERE job_id = \(jobID) AND status = \(JobStatus.dead)
                    """)
            }
            return true
        }
    }

    /// The ids of the dead letters a filter selects.
    public func matching(queue: String, filter: DeadLetterFilter) async throws -> [DeadLetterID] {
        var binds = PGBinds()
        let sql = "SELECT dead_letter_id FROM dead_letters WHERE queue = \(binds.append(queue)) AND "
            + "\(Self.conditions(filter, &binds)) ORDER BY dead_at"
        return try await pool.execute(PGQuery(unsafeSQL: sql, binds: binds)).map { try $0.decode(DeadLetterID.self, at: 0) }
    }

    /// Every dead letter id of a queue (to reconcile the broker's queue with the list).
    public func ids(queue: String) async throws -> Set<String> {
        Set(try await pool.execute("SELECT dead_letter_id FROM dead_letters WHERE queue = \(queue)")
            .map { try $0.decode(String.self, at: 0) })
    }
}

/// Every admin action: who, what, on what, how many, when.
public struct AuditStore: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    /// `subject`: the user whose data the action looked at or changed, when there is one.
    public func record(
        actor: String, action: String, target: String? = nil, subject: String? = nil, filter: DeadLetterFilter? = nil, count: Int
    ) async throws {
        let filter = try filter.map { PGJSON(try JSONCoding.encodeString($0)) }
        try await pool.execute("""
            INSERT INTO admin_audit (actor, action, target, subject, filter, count)
            VALUES (\(actor), \(action), \(target), \(subject), \(filter), \(Int32(count)))
            """)
    }

    public func recent(limit: Int) async throws -> [AuditEntry] {
        try await pool.execute("""
            SELECT syncline_rfc3339(at), actor, action, target, filter, count, subject
            FROM admin_audit ORDER BY audit_id DESC LIMIT \(limit)
            """).map { row in
            let (at, actor, action, target, filter, count, subject) =
                try row.decode((String, String, String, String?, PGJSON?, Int, String?).self)
            return AuditEntry(
                at: at, actor: actor, action: action, target: target, subject: subject,
                filter: try filter.map { try JSONCoding.decode(DeadLetterFilter.self, from: $0.text) }, count: count)
        }
    }
}
