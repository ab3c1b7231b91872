import Foundation
import PQBridge
import SyncModels

/// Job intake, status and the relay's view of unpublished jobs.
public struct JobStore: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    public struct Intake: Sendable {
        public var user: String
        public var deviceID: String
        public var ops: [Op]
        public var idempotencyKey: String?
        public var requestHash: String
        public var traceID: String?
        public var maxClockSkewMilliseconds: Int64
        /// The token's `name` claim: shown as the author of what this job publishes.
        public var authorName: String?
        /// The space pushed to (nil: the user's personal space); the caller checked the role.
        public var spaceID: String?

        public init(user: String, deviceID: String, ops: [Op], idempotencyKey: String?, requestHash: String, traceID: String?, maxClockSkewMilliseconds: Int64, authorName: String? = nil, spaceID: String? = nil) {
            self.authorName = authorName
            self.spaceID = spaceID
            self.user = user
            self.deviceID = deviceID
            self.ops = ops
            self.idempotencyKey = idempotencyKey
            self.requestHash = requestHash
            self.traceID = traceID
            self.maxClockSkewMilliseconds = maxClockSkewMilliseconds
        }
    }

    public enum IntakeOutcome: Sendable, Equatable {
        /// A new job, committed.
        case created(jobID: String, ops: Int)
        /// The same Idempotency-Key and body were seen before: that job.
        case existing(jobID: String, status: JobStatus, ops: Int)
        /// The Idempotency-Key was used before with a different body.
        case keyReused
        /// The device was revoked (or its account deleted) while the push came in.
        case deviceRevoked
    }

    /// Stamps the ops (HLC receive rule under the user's clock row lock), rejects clocks
    /// too far ahead, and commits the job — in one transaction.
    public func create(_ intake: Intake) async throws -> IntakeOutcome {
        do {
            return try await pool.transaction { connection in
                if let key = intake.idempotencyKey, let existing = try Self.existing(connection, user: intake.user, key: key, hash: intake.requestHash) {
                    return existing
                }
                // Creates the clock row on first use and locks it either way; reads the
                // personal space in the same statement (made below on a first push).
                let row = try connection.query("""
                    INSERT INTO user_clocks (user_id, hlc_ms, hlc_counter) VALUES ($1, 0, 0)
                    ON CONFLICT (user_id) DO UPDATE SET user_id = EXCLUDED.user_id
                    RETURNING hlc_ms, hlc_counter, \(SpaceStore.personalSpaceSQL("$1")) AS personal_space
                    """, [intake.user]).first
                guard let row else { throw PGError(code: .decoding, message: "user clock row missing") }
                var clock = HLCState(milliseconds: try row.int("hlc_ms"), counter: Int(try row.int("hlc_counter")))
                let now = Int64(Date().timeIntervalSince1970 * 1000)
                let ops = Self.stamp(intake.ops, clock: &clock, now: now, deviceID: intake.deviceID, maxSkew: intake.maxClockSkewMilliseconds)
                let jobID = UUID().uuidString.lowercased()
                let space = try intake.spaceID ?? row["personal_space"] ?? SpaceStore.personalSpace(connection, user: intake.user)
                // The device is checked again here, under the clock lock: a revocation or an
                // account deletion (which takes the same lock) either committed before — and
                // no job is written — or waits for this job and then erases it.
                let inserted = try connection.query("""
                    WITH clock AS (UPDATE user_clocks SET hlc_ms = $9, hlc_counter = $10 WHERE user_id = $2),
                    seen AS (UPDATE devices SET last_seen_at = clock_timestamp()
                             WHERE device_id = $3 AND last_seen_at < clock_timestamp() - interval '1 hour')
                    INSERT INTO jobs (job_id, user_id, device_id, status, ops, op_count, idempotency_key, request_hash, trace_id,
                                      author_name, space_id)
                    SELECT $1, $2, $3, 'queued', $4::jsonb, $5, $6, $7, $8, $11, $12::uuid
                    WHERE EXISTS (SELECT 1 FROM devices WHERE device_id = $3::uuid AND user_id = $2 AND revoked_at IS NULL)
                    """, [jobID, intake.user, intake.deviceID, Op.encodeStored(ops), ops.count,
                          intake.idempotencyKey, intake.requestHash, intake.traceID, clock.milliseconds, clock.counter,
                          intake.authorName, space])
                guard inserted.affectedRows == 1 else { throw DeviceRevoked() }
                return .created(jobID: jobID, ops: ops.count)
            }
        } catch is DeviceRevoked {
            return .deviceRevoked
        } catch let error as PGError where error.sqlState == "23505" && intake.idempotencyKey != nil {
            // A concurrent request with the same key won the race: answer with its job.
            return try await pool.withConnection { connection in
                try Self.existing(connection, user: intake.user, key: intake.idempotencyKey!, hash: intake.requestHash) ?? .keyReused
            }
        }
    }

    /// Several pushes in one transaction — group commit — with the checks and stamps of
    /// `create`, each step one statement for all of them: idempotency keys looked up
    /// (a key repeated within the batch answers with the first job), the users' clock
    /// rows locked in user order, their devices checked under those locks, the ops
    /// stamped in arrival order, and every job, clock and last-seen written together.
    /// One outcome per intake, in order. A database error rolls back all of them and is
    /// thrown: the caller then takes each push alone.
    public func create(batch intakes: [Intake]) async throws -> [IntakeOutcome] {
        try await pool.transaction { connection in
            var outcomes = [IntakeOutcome?](repeating: nil, count: intakes.count)
            struct UserKey: Hashable { let user: String, key: String }
            var earlier: [UserKey: (jobID: String, hash: String, ops: Int)] = [:]
            // The clock rows, made on first use and locked either way, in user order; with
            // each user's personal space (made below on a first push).
            var clocks: [String: HLCState] = [:]
            var spaces: [String: String] = [:]
            for row in try connection.query("""
                INSERT INTO user_clocks (user_id, hlc_ms, hlc_counter)
                SELECT u, 0, 0 FROM unnest($1::text[]) AS u ORDER BY u
                ON CONFLICT (user_id) DO UPDATE SET user_id = EXCLUDED.user_id
                RETURNING user_id, hlc_ms, hlc_counter, \(SpaceStore.personalSpaceSQL("user_clocks.user_id")) AS personal_space
                """, [Array(Set(intakes.map(\.user))).sorted()]).rows {
                let user = try row.string("user_id")
                clocks[user] = HLCState(milliseconds: try row.int("hlc_ms"), counter: Int(try row.int("hlc_counter")))
                spaces[user] = row["personal_space"]
            }
            // Keys are looked up under the clock locks too: a push with the same key that
            // committed meanwhile is found, not inserted twice.
            let keyed = intakes.indices.filter { intakes[$0].idempotencyKey != nil }
            if !keyed.isEmpty {
                for row in try connection.query("""
                    SELECT user_id, idempotency_key, job_id, status, op_count, request_hash
                    FROM jobs JOIN unnest($1::text[], $2::text[]) AS k(u, k) ON user_id = k.u AND idempotency_key = k.k
                    """, [keyed.map { intakes[$0].user }, keyed.map { intakes[$0].idempotencyKey! }]).rows {
                    let found = UserKey(user: try row.string("user_id"), key: try row.string("idempotency_key"))
                    for index in keyed where UserKey(user: intakes[index].user, key: intakes[index].idempotencyKey!) == found {
                        outcomes[index] = row["request_hash"] == intakes[index].requestHash
                            ? .existing(
                                jobID: try row.string("job_id"), status: JobStatus(rawValue: try row.string("status")) ?? .queued,
                                ops: Int(try row.int("op_count")))
                            : .keyReused
                    }
                }
            }
            // The devices are checked under the clock locks, which a revocation or an
            // account deletion takes too (see `create`).
            struct Device: Hashable { let id: String, user: String }
            let active = Set(try connection.query(
                "SELECT device_id::text AS id, user_id FROM devices WHERE device_id = ANY($1::uuid[]) AND revoked_at IS NULL",
                [Array(Set(intakes.map(\.deviceID)))]
            ).rows.map { Device(id: try $0.string("id"), user: try $0.string("user_id")) })

            let now = Int64(Date().timeIntervalSince1970 * 1000)
            var jobs: [(id: String, intake: Intake, ops: [Op], space: String)] = []
            for (index, intake) in intakes.enumerated() where outcomes[index] == nil {
                if let key = intake.idempotencyKey, let first = earlier[UserKey(user: intake.user, key: key)] {
                    outcomes[index] = first.hash == intake.requestHash
                        ? .existing(jobID: first.jobID, status: .queued, ops: first.ops) : .keyReused
                    continue
                }
                guard active.contains(Device(id: intake.deviceID, user: intake.user)), var clock = clocks[intake.user] else {
                    outcomes[index] = .deviceRevoked
                    continue
                }
                let ops = Self.stamp(intake.ops, clock: &clock, now: now, deviceID: intake.deviceID, maxSkew: intake.maxClockSkewMilliseconds)
                clocks[intake.user] = clock
                let space: String
                if let chosen = intake.spaceID ?? spaces[intake.user] {
                    space = chosen
                } else {
                    space = try SpaceStore.personalSpace(connection, user: intake.user)
                    spaces[intake.user] = space
                }
                let jobID = UUID().uuidString.lowercased()
                jobs.append((jobID, intake, ops, space))
                if let key = intake.idempotencyKey {
                    earlier[UserKey(user: intake.user, key: key)] = (jobID, intake.requestHash, ops.count)
                }
                outcomes[index] = .created(jobID: jobID, ops: ops.count)
            }
            if !jobs.isEmpty {
                let users = clocks.keys.sorted()
                try connection.query("""
                    WITH clock AS (
                      UPDATE user_clocks c SET hlc_ms = u.ms, hlc_counter = u.n
                      FROM unnest($11::text[], $12::bigint[], $13::int[]) AS u(id, ms, n) WHERE c.user_id = u.id),
                    seen AS (
                      UPDATE devices SET last_seen_at = clock_timestamp()
                      WHERE device_id = ANY($14::uuid[]) AND last_seen_at < clock_timestamp() - interval '1 hour')
                    INSERT INTO jobs (job_id, user_id, device_id, status, ops, op_count, idempotency_key, request_hash, trace_id,
                                      author_name, space_id)
                    SELECT j, u, d, 'queued', o::jsonb, n, k, h, t, a, s
                    FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::text[], $5::int[], $6::text[], $7::text[], $8::text[],
                                $9::text[], $10::uuid[]) AS x(j, u, d, o, n, k, h, t, a, s)
                    """, [
                        jobs.map(\.id), jobs.map(\.intake.user), jobs.map(\.intake.deviceID), jobs.map { Op.encodeStored($0.ops) },
                        jobs.map(\.ops.count), jobs.map(\.intake.idempotencyKey), jobs.map(\.intake.requestHash),
                        jobs.map(\.intake.traceID), jobs.map(\.intake.authorName), jobs.map(\.space),
                        users, users.map { clocks[$0]!.milliseconds }, users.map { clocks[$0]!.counter },
                        Array(Set(jobs.map(\.intake.deviceID))),
                    ])
            }
            return outcomes.map { $0 ?? .deviceRevoked }
        }
    }

    /// Thrown inside the intake transaction so that its clock update rolls back.
    private struct DeviceRevoked: Error {}

    /// The HLC receive rule: client clocks within the skew bound are accepted and
    /// observed; ops without one get server stamps, in order; clocks too far ahead are
    /// marked `clock_skew` and neither observed nor applied.
    public static func stamp(_ ops: [Op], clock: inout HLCState, now: Int64, deviceID: String, maxSkew: Int64) -> [Op] {
        ops.map { op in
            var op = op
            if let text = op.hlc, let hlc = HLC(text) {
                if hlc.milliseconds > now + maxSkew {
                    op.rejected = RejectReason.clockSkew
                } else {
                    clock.observe(hlc)
                }
            } else {
                op.hlc = clock.next(now: now, node: deviceID).description
            }
            return op
        }
    }

    private static func existing(_ connection: PGConnection, user: String, key: String, hash: String) throws -> IntakeOutcome? {
        guard let row = try connection.query(
            "SELECT job_id, status, op_count, request_hash FROM jobs WHERE user_id = $1 AND idempotency_key = $2",
            [user, key]
        ).first else { return nil }
        guard row["request_hash"] == hash else { return .keyReused }
        return .existing(
            jobID: try row.string("job_id"), status: JobStatus(rawValue: try row.string("status")) ?? .queued,
            ops: Int(try row.int("op_count")))
    }

    /// The user's job. Another user's job is filtered out by the statement itself, so it
    /// is answered with the same work, and in the same time, as an unknown id (G6).
    public func view(user: String, jobID: String) async throws -> JobView? {
        guard let id = UUID(uuidString: jobID) else { return nil }
        return try await pool.execute("\(sql: Self.viewColumns) FROM jobs WHERE job_id = \(id) AND user_id = \(user)")
            .first.map { try Self.view($0).job }
    }

    /// A job regardless of its owner (operators' tools).
    public func view(jobID: String) async throws -> (user: String, job: JobView)? {
        guard let id = UUID(uuidString: jobID) else { return nil }
        return try await pool.execute("\(sql: Self.viewColumns) FROM jobs WHERE job_id = \(id)").first.map(Self.view)
    }

    /// What `view` reads, in its order.
    static let viewColumns = """
        SELECT job_id, user_id, space_id, status, attempts, attempt_log, syncline_rfc3339(created_at),
               syncline_rfc3339(finished_at), last_error, checkpoint, results
        """

    static func view(_ row: PGRows.Row) throws -> (user: String, job: JobView) {
        let (jobID, user, space, stored, attempts, attemptLog, createdAt, finishedAt, lastError, checkpoint, storedResults) =
            try row.decode((String, String, String?, String, Int, PGJSON, String, String?, String?, Int64?, PGJSON?).self)
        let status = JobStatus(rawValue: stored) ?? .queued
        let log = try JSONCoding.decode([AttemptView].self, from: attemptLog.text)
        let results = try storedResults.map { try JSONCoding.decode([OpResult].self, from: $0.text) } ?? []
        return (user, JobView(
            jobID: jobID, status: status, attempts: attempts, attemptLog: log, createdAt: createdAt, finishedAt: finishedAt,
            lastError: lastError, checkpoint: checkpoint.map(String.init), results: status == .succeeded ? results : [],
            spaceID: space))
    }

    /// Records that these jobs' messages were confirmed. Only a job still `queued` can be
    /// relayed, so only those rows are rewritten: under a load the workers keep up with,
    /// most jobs are applied before the relay's next pass and their rows are left alone.
    public func markPublished(_ jobIDs: [String]) async throws {
        let ids = jobIDs.compactMap(UUID.init(uuidString:))
        guard !ids.isEmpty else { return }
        try await pool.execute("""
            UPDATE jobs SET published_at = clock_timestamp()
            WHERE job_id = ANY(\(ids)) AND status = \(literal: JobStatus.queued) AND published_at IS NULL
            """)
    }

    /// Queued jobs nobody has confirmed publishing, older than `age` seconds. (The status
    /// is a literal: the `jobs_unpublished` partial index is for it.)
    public func unpublished(olderThan age: Double, limit: Int) async throws -> [(jobID: String, traceID: String?, ops: Int)] {
        try await pool.execute("""
            SELECT job_id, trace_id, op_count FROM jobs
            WHERE status = \(literal: JobStatus.queued) AND published_at IS NULL
              AND created_at < clock_timestamp() - make_interval(secs => \(age))
            ORDER BY created_at LIMIT \(limit)
            """).map { row in
            let (id, trace, ops) = try row.decode((String, String?, Int).self)
            return (id, trace, ops)
        }
    }

    /// How many jobs are not terminal, and seconds since the oldest of them was created
    /// (0 when none). (Literals: the `jobs_unfinished` partial index is for them.)
    public func backlog() async throws -> (unfinished: Int, oldestAge: Double) {
        let row = try await pool.execute("""
            SELECT count(*), coalesce(extract(epoch FROM clock_timestamp() - min(created_at)), 0)::float8
            FROM jobs
            WHERE status IN (\(literal: JobStatus.queued), \(literal: JobStatus.processing), \(literal: JobStatus.retrying))
            """).first
        guard let row else { return (0, 0) }
        let (count, age) = try row.decode((Int, Double).self)
        return (count, age)
    }

    /// Jobs finished per minute over the last `minutes` minutes (oldest first), and the
    /// jobs not yet finished.
    public func rates(minutes: Int) async throws -> JobRates {
        let rows = try await pool.execute("""
            WITH finished AS (
              SELECT date_trunc('minute', finished_at) AS minute, status, count(*) AS n FROM jobs
              WHERE finished_at >= date_trunc('minute', clock_timestamp()) - make_interval(mins => \(Int32(minutes - 1)))
              GROUP BY 1, 2
            )
            SELECT syncline_rfc3339(m),
                   coalesce(sum(n) FILTER (WHERE status = \(JobStatus.succeeded)), 0)::int8,
                   coalesce(sum(n) FILTER (WHERE status = \(JobStatus.dead)), 0)::int8
            FROM generate_series(date_trunc('minute', clock_timestamp()) - make_interval(mins => \(Int32(minutes - 1))),
                                 date_trunc('minute', clock_timestamp()), interval '1 minute') AS m
            LEFT JOIN finished ON finished.minute = m
            GROUP BY m ORDER BY m
            """)
        let backlog = try await backlog()
        return JobRates(
            minutes: try rows.map { row in
                let (minute, succeeded, dead) = try row.decode((String, Int, Int).self)
                return JobRates.Minute(minute: minute, succeeded: succeeded, dead: dead)
            },
            unfinished: backlog.unfinished, oldestUnfinishedAgeSeconds: backlog.oldestAge)
    }
}
