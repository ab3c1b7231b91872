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
        public let userID: String?
        public let deviceID: String?
        public let spaceID: String?
    }

    /// Records a dead letter and, when the message names a job, marks that job dead with
    /// the error — one transaction. Returns nil, recording nothing, when the job already
    /// succeeded or was discarded (a late duplicate has nothing to park).
    /// `userID`/`deviceID` name whom a message that is not a job concerns (a webhook).
    public func record(
        id: String, queue: String = "sync", namedJobID: String?, reason: String, error: String, message: String,
        userID: String? = nil, deviceID: String? = nil, attempts: Int? = nil
    ) async throws -> Recorded? {
        try await pool.transaction { connection in
            var job: PGRow?
            if let namedJobID {
                job = try connection.query("""
                    SELECT job_id, user_id, device_id, space_id, op_count, attempts, status FROM jobs WHERE job_id = $1 FOR UPDATE
                    """, [namedJobID]).first
                if let status = job?["status"], status == JobStatus.succeeded.rawValue || status == JobStatus.discarded.rawValue {
                    return nil
                }
                if job != nil {
                    try connection.query("""
                        UPDATE jobs SET status = 'dead', last_error = $2, finished_at = clock_timestamp(),
                          attempt_log = \(ApplyStore.closingLastAttempt(error: "$2::text"))
                        WHERE job_id = $1
                        """, [namedJobID, "\(reason): \(error)"])
                }
            }
            try connection.query("""
                INSERT INTO dead_letters
                  (dead_letter_id, queue, job_id, user_id, device_id, reason, last_error, attempts, op_count, payload, space_id)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
                ON CONFLICT (dead_letter_id) DO UPDATE SET
                  reason = EXCLUDED.reason, last_error = EXCLUDED.last_error, attempts = EXCLUDED.attempts
                """, [
                    id, queue, job?["job_id"], job?["user_id"] ?? userID, job?["device_id"] ?? deviceID, reason, error,
                    Int(job?.optionalInt("attempts") ?? Int64(attempts ?? 0)), Int(job?.optionalInt("op_count") ?? 0), message,
                    job?["space_id"],
                ])
            return Recorded(
                attempts: Int(job?.optionalInt("attempts") ?? Int64(attempts ?? 0)),
                userID: job?["user_id"] ?? userID, deviceID: job?["device_id"] ?? deviceID, spaceID: job?["space_id"])
        }
    }

    /// The columns of a list item, from table alias `d`.
    static let itemColumns = """
        d.dead_letter_id, d.queue, d.user_id, d.device_id, d.space_id, d.attempts, d.reason, d.last_error,
        syncline_rfc3339(d.dead_at) AS dead_at, d.op_count,
        (extract(epoch FROM d.dead_at) * 1000000)::bigint AS dead_at_microseconds
        """

    static func item(_ row: PGRow) throws -> DeadLetterItem {
        DeadLetterItem(
            jobID: try row.string("dead_letter_id"), queue: try row.string("queue"), userID: row["user_id"],
            deviceID: row["device_id"], spaceID: row["space_id"], attempts: Int(try row.int("attempts")), reason: try row.string("reason"),
            lastError: row["last_error"], deadAt: try row.string("dead_at"), ops: Int(try row.int("op_count")))
    }

    /// SQL conditions for a filter, binding from parameter `first` on.
    static func conditions(_ filter: DeadLetterFilter, first: Int) -> (sql: String, parameters: [(any PGBindable)?]) {
        (
            """
            ($\(first)::text IS NULL OR user_id = $\(first)) AND ($\(first + 1)::text IS NULL OR reason = $\(first + 1))
              AND ($\(first + 2)::timestamptz IS NULL OR dead_at < $\(first + 2))
              AND ($\(first + 3)::timestamptz IS NULL OR dead_at > $\(first + 3))
              AND ($\(first + 4)::uuid IS NULL OR space_id = $\(first + 4)::uuid)
            """,
            [filter.userID, filter.reason, filter.deadBefore, filter.deadAfter, filter.spaceID]
        )
    }

    /// Newest first, `limit` at a time; `cursor` is the previous page's `next_cursor`.
    public func list(queue: String, filter: DeadLetterFilter, limit: Int, cursor: Cursor?) async throws -> DeadLetterPage {
        let (conditions, parameters) = Self.conditions(filter, first: 5)
        let rows = try await pool.query("""
            SELECT \(Self.itemColumns) FROM dead_letters d
            WHERE queue = $1 AND ($2::bigint IS NULL
                OR (dead_at, dead_letter_id) < (timestamptz 'epoch' + $2::bigint * interval '1 microsecond', $3::uuid))
              AND \(conditions)
            ORDER BY dead_at DESC, dead_letter_id DESC
            LIMIT $4
            """, [queue, cursor?.deadAtMicroseconds, cursor?.id, limit + 1] + parameters).rows
        let items = try rows.prefix(limit).map(Self.item)
        let next = rows.count > limit
            ? Cursor(deadAtMicroseconds: try rows[limit - 1].int("dead_at_microseconds"), id: try rows[limit - 1].string("dead_letter_id")).text
            : nil
        return DeadLetterPage(items: items, nextCursor: next)
    }

    /// A position in the list: the last item's exact time and id.
    /// Where a page ends: `<dead_at in microseconds since 1970>_<dead_letter_id>`. Any
    /// text of that shape is a valid position (the page after it), so a cursor is checked
    /// by its shape alone and never reaches PostgreSQL as something it could refuse.
    public struct Cursor: Sendable, Equatable {
        public let deadAtMicroseconds: Int64
        public let id: String

        public init?(text: String) {
            let parts = text.split(separator: "_", omittingEmptySubsequences: false)
            guard parts.count == 2, (1...16).contains(parts[0].utf8.count), parts[0].utf8.allSatisfy({ (48...57).contains($0) }),
                  let microseconds = Int64(parts[0]), let id = Names.canonicalUUID(String(parts[1]))
            else { return nil }
            self.init(deadAtMicroseconds: microseconds, id: id)
        }

        init(deadAtMicroseconds: Int64, id: String) {
            self.deadAtMicroseconds = deadAtMicroseconds
            self.id = id
        }

        public var text: String { "\(deadAtMicroseconds)_\(id)" }
    }

    /// One dead letter with its message, the job's ops and its attempts.
    public func detail(id: String) async throws -> DeadLetterDetail? {
        guard let id = Names.canonicalUUID(id) else { return nil }
        guard let row = try await pool.query("""
            SELECT \(Self.itemColumns), d.payload, j.ops, j.status AS job_status, j.attempt_log
            FROM dead_letters d LEFT JOIN jobs j ON j.job_id = d.job_id
            WHERE d.dead_letter_id = $1
            """, [id]).first
        else { return nil }
        return DeadLetterDetail(
            item: try Self.item(row), message: try row.string("payload"),
            payload: try row["ops"].map { try JSONParser.parse($0) },
            jobStatus: row["job_status"].flatMap(JobStatus.init(rawValue:)),
            attemptLog: try row["attempt_log"].map { try JSONCoding.decode([AttemptView].self, from: $0) } ?? [])
    }

    public enum ReplayOutcome: Sendable, Equatable {
        /// The job is queued again with its attempts reset; publish it.
        case replayed(jobID: String, traceID: String?)
        /// A webhook delivery: publish its message again (attempts reset), then `remove` it.
        case redeliver(id: String, message: String)
        case notFound
        /// The dead letter names no job that could run (not a job message, or an unknown job).
        case namesNoJob
    }

    /// Takes the dead letter off the list and queues its job again with attempts reset
    /// (unpublished, so the gateway's relay publishes it if the caller cannot).
    public func replay(id: String) async throws -> ReplayOutcome {
        guard let id = Names.canonicalUUID(id) else { return .notFound }
        return try await pool.transaction { connection in
            guard let letter = try connection.query(
                "SELECT job_id, queue, payload FROM dead_letters WHERE dead_letter_id = $1 FOR UPDATE", [id]
            ).first else { return .notFound }
            if letter["queue"] == "notify" {
                // Kept until the caller has published it again (`remove`): never lost in between.
                return .redeliver(id: id, message: try letter.string("payload"))
            }
            guard let jobID = letter["job_id"] else { return .namesNoJob }
            let job = try connection.query("""
                UPDATE jobs SET status = 'queued', attempts = 0, published_at = NULL, finished_at = NULL, last_error = NULL
                WHERE job_id = $1 AND status = 'dead'
                RETURNING trace_id
                """, [jobID]).first
            try connection.query("DELETE FROM dead_letters WHERE dead_letter_id = $1", [id])
            guard let job else { return .notFound }
            return .replayed(jobID: jobID, traceID: job["trace_id"])
        }
    }

    /// Takes a dead letter off the list once it has been sent again.
    public func remove(id: String) async throws {
        try await pool.query("DELETE FROM dead_letters WHERE dead_letter_id = $1", [id])
    }

    /// Takes the dead letter off the list for good; its job says `discarded`.
    public func discard(id: String) async throws -> Bool {
        guard let id = Names.canonicalUUID(id) else { return false }
        return try await pool.transaction { connection in
            guard let letter = try connection.query(
                "DELETE FROM dead_letters WHERE dead_letter_id = $1 RETURNING job_id", [id]
            ).first else { return false }
            if let jobID = letter["job_id"] {
                try connection.query(
                    "UPDATE jobs SET status = 'discarded', finished_at = clock_timestamp() WHERE job_id = $1 AND status = 'dead'",
                    [jobID])
            }
            return true
        }
    }

    /// The ids of the dead letters a filter selects.
    public func matching(queue: String, filter: DeadLetterFilter) async throws -> [String] {
        let (conditions, parameters) = Self.conditions(filter, first: 2)
        return try await pool.query(
            "SELECT dead_letter_id FROM dead_letters WHERE queue = $1 AND \(conditions) ORDER BY dead_at",
            [queue] + parameters
        ).rows.map { try $0.string("dead_letter_id") }
    }

    /// Every dead letter id of a queue (to reconcile the broker's queue with the list).
    public func ids(queue: String) async throws -> Set<String> {
        Set(try await pool.query("SELECT dead_letter_id FROM dead_letters WHERE queue = $1", [queue])
            .rows.map { try $0.string("dead_letter_id") })
    }
}

/// Every admin action: who, what, on what, how many, when.
public struct AuditStore: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    public func record(actor: String, action: String, target: String? = nil, filter: DeadLetterFilter? = nil, count: Int) async throws {
        try await pool.query(
            "INSERT INTO admin_audit (actor, action, target, filter, count) VALUES ($1, $2, $3, $4::jsonb, $5)",
            [actor, action, target, try filter.map { try JSONCoding.encodeString($0) }, count])
    }

    public func recent(limit: Int) async throws -> [AuditEntry] {
        try await pool.query("""
            SELECT syncline_rfc3339(at) AS at, actor, action, target, filter, count
            FROM admin_audit ORDER BY audit_id DESC LIMIT $1
            """, [limit]).rows.map { row in
            AuditEntry(
                at: try row.string("at"), actor: try row.string("actor"), action: try row.string("action"),
                target: row["target"], filter: try row["filter"].map { try JSONCoding.decode(DeadLetterFilter.self, from: $0) },
                count: Int(try row.int("count")))
        }
    }
}
