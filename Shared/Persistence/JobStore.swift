import Foundation
import PQBridge
import SyncModels

/// Job intake, status and the relay's view of unpublished jobs.
public struct JobStore: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    public struct Intake: Sendable {
        public var user: UserID
        public var deviceID: DeviceID
        public var ops: [Op]
        public var idempotencyKey: String?
        public var requestHash: String
        public var traceID: String?
        public var maxClockSkewMilliseconds: Int64
        /// The token's `name` claim: shown as the author of what this job publishes.
        public var authorName: String?
        /// The space pushed to (nil: the user's personal space); the caller checked the role.
        public var spaceID: SpaceID?
        /// The app's rules, which screen the ops by the pusher's role in the space.
        public var rules: Rules
        /// The app's backend pushes (`user` is its `ServicePrincipal.user`, `deviceID` its
        /// token's id, `spaceID` set, its scope checked by the caller): no device, no
        /// membership, the `service` role.
        public var asService = false

        public init(user: UserID, deviceID: DeviceID, ops: [Op], idempotencyKey: String?, requestHash: String, traceID: String?, maxClockSkewMilliseconds: Int64, authorName: String? = nil, spaceID: SpaceID? = nil, rules: Rules = .none) {
            self.rules = rules
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
        case created(JobRef, ops: Int)
        /// The same Idempotency-Key and body were seen before: that job.
        case existing(jobID: JobID, status: JobStatus, ops: Int)
        /// The Idempotency-Key was used before with a different body.
        case keyReused
        /// The device is not the user's (or does not exist).
        case deviceNotFound
        /// The device was revoked (or its account deleted).
        case deviceRevoked
        /// The space pushed to does not exist, or the user is not a member.
        case spaceNotFound
        /// The user is a viewer of the space pushed to.
        case spaceReadOnly
        /// Op `op` references a file (`sha256`) the space does not hold.
        case blobMissing(op: Int, sha256: String)
        /// The app's rules refuse op `op` for the pusher's role.
        case ruleRefused(op: Int, RuleRefusal)
    }

    /// One push: a batch of one (see `create(batch:)`), so a single push and a group
    /// commit run the same checks and stamps on the same code.
    public func create(_ intake: Intake) async throws -> IntakeOutcome {
        do {
            return try await create(batch: [intake])[0]
        } catch let error as PGError where error.isUniqueViolation && intake.idempotencyKey != nil {
            // A request with the same key committed between this one's lookup and insert:
            // answer with its job (once a standby holds it, when the pool waits for one).
            return try await pool.confirmed { connection in
                try Self.existing(connection, intake) ?? .keyReused
            }
        }
    }

    /// Several pushes in one transaction — group commit — each step one statement for all
    /// of them: the users' clock rows locked in user order (the lock a revocation and an
    /// account deletion take too), the devices and roles checked under those locks (so the
    /// gateway checks neither before), idempotency keys looked up under them (a key
    /// repeated within the batch answers with the first job), the ops stamped in arrival
    /// order (HLC receive rule; clocks too far ahead rejected), and every job, clock and
    /// last-seen written together. One outcome per intake, in order. A database error
    /// rolls back all of them and is thrown: the caller then takes each push alone.
    public func create(batch intakes: [Intake]) async throws -> [IntakeOutcome] {
        try await pool.transaction { connection in
            var (clocks, spaces) = try Self.lockClocks(connection, users: Set(intakes.map(\.user)))
            var (outcomes, roles) = try Self.checkDevicesAndRoles(connection, intakes)
            // A key is the user's within the space pushed to (a personal space not made yet holds no job).
            let pushedSpace = { (intake: Intake) in intake.spaceID ?? spaces[intake.user] }
            try Self.answerRepeatedKeys(connection, intakes, pushedSpace: pushedSpace, outcomes: &outcomes)
            Self.screenByRules(intakes, roles: roles, outcomes: &outcomes)
            try Self.claimBlobs(connection, intakes, spaces: spaces, outcomes: &outcomes)
            let jobs = try Self.stamp(connection, intakes, clocks: &clocks, spaces: &spaces, outcomes: &outcomes)
            let decided = outcomes.compactMap { $0 }
            guard decided.count == intakes.count else { throw UnexpectedAnswer("a push of the batch was given no outcome") }
            if !jobs.isEmpty { try Self.writeAndCommit(connection, jobs, clocks: clocks) }
            return decided
        }
    }

    /// A job about to be written: its id, push, stamped ops and space.
    typealias NewJob = (id: JobID, intake: Intake, ops: [Op], space: SpaceID)

    /// The users' clock rows, made on first use and locked either way, in user order; with
    /// each user's personal space (made later, on a first push, when there is none).
    static func lockClocks(
        _ connection: PGConnection, users: Set<UserID>
    ) throws -> (clocks: [UserID: HLCState], personalSpaces: [UserID: SpaceID]) {
        var clocks: [UserID: HLCState] = [:], spaces: [UserID: SpaceID] = [:]
        for row in try connection.execute("""
            INSERT INTO user_clocks (user_id, hlc_ms, hlc_counter)
            SELECT u, 0, 0 FROM unnest(\(users.sorted())) AS u ORDER BY u
            ON CONFLICT (user_id) DO UPDATE SET user_id = EXCLUDED.user_id
            RETURNING user_id, hlc_ms, hlc_counter, (SELECT space_id FROM spaces WHERE personal_of = user_clocks.user_id)
            """) {
            let (user, milliseconds, counter, personal) = try row.decode((UserID, Int64, Int, SpaceID?).self)
            clocks[user] = HLCState(milliseconds: milliseconds, counter: counter)
            spaces[user] = personal
        }
        return (clocks, spaces)
    }

    /// The devices, checked under the clock locks, which a revocation and an account
    /// deletion take too: either it committed before — and no job is written — or it waits
    /// for these jobs and then sees (or erases) them. The role in a space pushed to is
    /// checked here too (and again by the worker under the space's counter lock: isolation).
    /// Both come before the keys: a revoked device replaying a key is refused all the same.
    /// Returns each push's refusal, or nil, and the pusher's role (an owner's in a personal space).
    static func checkDevicesAndRoles(
        _ connection: PGConnection, _ intakes: [Intake]
    ) throws -> (outcomes: [IntakeOutcome?], roles: [SpaceRole?]) {
        var devices: [DeviceID: (user: UserID, active: Bool)] = [:]
        for row in try connection.execute("""
            SELECT device_id, user_id, revoked_at IS NULL FROM devices
            WHERE device_id = ANY(\(Array(Set(intakes.map(\.deviceID)))))
            """) {
            let (id, user, active) = try row.decode((DeviceID, UserID, Bool).self)
            devices[id] = (user, active)
        }
        struct Member: Hashable { let space: SpaceID, user: UserID }
        let chosen = intakes.filter { $0.spaceID != nil }
        var roles: [Member: SpaceRole] = [:]
        if !chosen.isEmpty {
            for row in try connection.execute("""
                SELECT m.space_id, m.user_id, m.role
                FROM space_members m JOIN unnest(\(chosen.map { $0.spaceID! }), \(chosen.map(\.user))) AS k(space_id, user_id)
                  USING (space_id, user_id)
                """) {
                let (space, user, role) = try row.decode((SpaceID, UserID, String).self)
                roles[Member(space: space, user: user)] = SpaceRole(rawValue: role)
            }
        }
        let services = intakes.filter(\.asService).compactMap(\.spaceID)
        let serviceSpaces = services.isEmpty ? [] : Set(try connection.execute(
            "SELECT space_id FROM spaces WHERE space_id = ANY(\(services))").map { try $0.decode(SpaceID.self, at: 0) })
        let outcomes = intakes.map { (intake: Intake) -> IntakeOutcome? in
            if intake.asService {
                return intake.spaceID.map(serviceSpaces.contains) == true ? nil : .spaceNotFound
            }
            switch devices[intake.deviceID] {
            case let device? where device.user == intake.user:
                if !device.active { return .deviceRevoked }
            default:
                return .deviceNotFound
            }
            guard let space = intake.spaceID else { return nil }
            switch roles[Member(space: space, user: intake.user)] {
            case nil: return .spaceNotFound
            case let role? where !role.canWrite: return .spaceReadOnly
            default: return nil
            }
        }
        return (outcomes, intakes.map { intake in
            intake.asService ? .service : intake.spaceID.map { roles[Member(space: $0, user: intake.user)] } ?? .owner
        })
    }

    /// The pushes still undecided whose ops the app's rules refuse for the pusher's role:
    /// refused whole (no job), naming the first such op. After the keys: a push accepted
    /// before the rules changed, sent again, still answers with its job.
    static func screenByRules(_ intakes: [Intake], roles: [SpaceRole?], outcomes: inout [IntakeOutcome?]) {
        for (index, intake) in intakes.enumerated() where outcomes[index] == nil && intake.rules.mustScreen(intake.ops) {
            guard let role = roles[index] else { continue }
            for (position, op) in intake.ops.enumerated() where op.rejected == nil {
                if let refusal = intake.rules.screen(op, role: role) {
                    outcomes[index] = .ruleRefused(op: position, refusal)
                    break
                }
            }
        }
    }

    /// Pushes whose idempotency key the user used before in the space answer with that
    /// job (the same body) or `keyReused`. Looked up under the clock locks: a push with the
    /// same key that committed meanwhile is found, not inserted twice.
    static func answerRepeatedKeys(
        _ connection: PGConnection, _ intakes: [Intake], pushedSpace: (Intake) -> SpaceID?, outcomes: inout [IntakeOutcome?]
    ) throws {
        let keyed = intakes.indices.filter { intakes[$0].idempotencyKey != nil && outcomes[$0] == nil && pushedSpace(intakes[$0]) != nil }
        guard !keyed.isEmpty else { return }
        struct UserKey: Hashable { let space: SpaceID, user: UserID, key: String }
        for row in try connection.execute("""
            SELECT space_id, user_id, idempotency_key, job_id, status, op_count, request_hash
            FROM jobs JOIN unnest(\(keyed.map { pushedSpace(intakes[$0])! }), \(keyed.map { intakes[$0].user }),
                                 \(keyed.map { intakes[$0].idempotencyKey! })) AS k(s, u, k)
              ON space_id = k.s AND user_id = k.u AND idempotency_key = k.k
            """) {
            let (space, user, key, jobID, status, ops, hash) = try row.decode((SpaceID, UserID, String, JobID, String, Int, String?).self)
            let found = UserKey(space: space, user: user, key: key)
            for index in keyed where UserKey(space: pushedSpace(intakes[index])!, user: intakes[index].user, key: intakes[index].idempotencyKey!) == found {
                outcomes[index] = hash == intakes[index].requestHash
                    ? .existing(jobID: jobID, status: JobStatus(rawValue: status) ?? .queued, ops: ops)
                    : .keyReused
            }
        }
    }

    /// The pushes still undecided become jobs, in arrival order: each op stamped by its
    /// user's clock (HLC receive rule; clocks too far ahead rejected), in the space pushed
    /// to (a first push makes the personal space). A key repeated within the batch answers
    /// with the first job.
    static func stamp(
        _ connection: PGConnection, _ intakes: [Intake], clocks: inout [UserID: HLCState], spaces: inout [UserID: SpaceID],
        outcomes: inout [IntakeOutcome?]
    ) throws -> [NewJob] {
        struct UserKey: Hashable { let space: SpaceID, user: UserID, key: String }
        var earlier: [UserKey: (jobID: JobID, hash: String, ops: Int)] = [:]
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        var jobs: [NewJob] = []
        for (index, intake) in intakes.enumerated() where outcomes[index] == nil {
            let space: SpaceID
            if let chosen = intake.spaceID ?? spaces[intake.user] {
                space = chosen
            } else {
                space = try SpaceStore.personalSpace(connection, user: intake.user)
                spaces[intake.user] = space
            }
            if let key = intake.idempotencyKey, let first = earlier[UserKey(space: space, user: intake.user, key: key)] {
                outcomes[index] = first.hash == intake.requestHash
                    ? .existing(jobID: first.jobID, status: .queued, ops: first.ops) : .keyReused
                continue
            }
            guard var clock = clocks[intake.user] else { throw UnexpectedAnswer("no clock row was locked for a user of the batch") }
            let ops = clock.stamp(intake.ops, now: now, deviceID: intake.deviceID.description, maxSkew: intake.maxClockSkewMilliseconds)
            clocks[intake.user] = clock
            let jobID = JobID(UUID.timeOrdered())
            jobs.append((jobID, intake, ops, space))
            if let key = intake.idempotencyKey {
                earlier[UserKey(space: space, user: intake.user, key: key)] = (jobID, intake.requestHash, ops.count)
            }
            outcomes[index] = .created(JobRef(space: space, job: jobID), ops: ops.count)
        }
        return jobs
    }

    /// Every job, clock and device's last-seen written together, in one statement sent with
    /// the transaction's COMMIT.
    static func writeAndCommit(_ connection: PGConnection, _ jobs: [NewJob], clocks: [UserID: HLCState]) throws {
        let users = clocks.keys.sorted()
        var clockRows = PGUnnest()
        clockRows.column("user_id", users)
        clockRows.column("hlc_ms", users.map { clocks[$0]!.milliseconds })
        clockRows.column("hlc_counter", users.map { Int32(clocks[$0]!.counter) })
        let rows = newJobRows(jobs)
        var named = PGUnnest()
        named.column("space_id", jobs.map(\.space))
        named.column("job_id", jobs.map(\.id))
        named.column("records", jobs.map { job in RecordKey.list(space: job.space, ops: job.ops) })
        try connection.executeThenCommit("""
            WITH clock AS (
              UPDATE user_clocks c SET hlc_ms = u.hlc_ms, hlc_counter = u.hlc_counter
              FROM \(clockRows, as: "u") WHERE c.user_id = u.user_id),
            seen AS (
              UPDATE devices SET last_seen_at = clock_timestamp()
              WHERE device_id = ANY(\(Array(Set(jobs.map(\.intake.deviceID)))))
                AND last_seen_at < clock_timestamp() - interval '1 hour'),
            named AS (
              INSERT INTO job_records (space_id, job_id, records)
              SELECT n.space_id, n.job_id, string_to_array(n.records, \(RecordKey.separator)) FROM \(named, as: "n"))
            INSERT INTO jobs (\(sql: rows.names), status)
            SELECT \(sql: rows.names), \(JobStatus.queued) FROM \(rows, as: "x")
            """)
    }

    /// How `job_records` names a record: `<space>/<collection>/<id>` (neither a collection
    /// nor a record id holds a slash).
    public enum RecordKey {
        public static func of(space: SpaceID, collection: String, id: String) -> String { "\(space)/\(collection)/\(id)" }

        /// Joins a job's keys for `string_to_array` (a newline: in no key).
        static let separator = "\n"

        static func list(space: SpaceID, ops: [Op]) -> String {
            var seen = Set<String>()
            return ops.map { of(space: space, collection: $0.collection, id: $0.id) }.filter { seen.insert($0).inserted }
                .joined(separator: separator)
        }
    }

    /// The `jobs` columns a new job is written with (its status aside: queued), a row per job.
    private static func newJobRows(_ jobs: [NewJob]) -> PGUnnest {
        var rows = PGUnnest()
        rows.column("job_id", jobs.map(\.id))
        rows.column("user_id", jobs.map(\.intake.user))
        rows.column("device_id", jobs.map(\.intake.deviceID))
        rows.column("space_id", jobs.map(\.space))
        rows.column("ops", jobs.map { PGJSON(Op.encodeStored($0.ops)) })
        rows.column("op_count", jobs.map { Int32($0.ops.count) })
        rows.column("idempotency_key", jobs.map(\.intake.idempotencyKey))
        rows.column("request_hash", jobs.map(\.intake.requestHash))
        rows.column("trace_id", jobs.map(\.intake.traceID))
        rows.column("author_name", jobs.map(\.intake.authorName))
        return rows
    }

    /// Checks that every file the pushes reference is in the space pushed to, claiming it
    /// there: its row's `claimed_at` moves to now, so purge, whose delete re-reads a row it
    /// waited for, keeps it until the job is applied (and counts the reference). A push
    /// with a missing file is refused whole; pushes without references cost nothing.
    static func claimBlobs(
        _ connection: PGConnection, _ intakes: [Intake], spaces: [UserID: SpaceID], outcomes: inout [IntakeOutcome?]
    ) throws {
        var wanted: [(index: Int, op: Int, space: SpaceID?, sha256: String)] = []
        for (index, intake) in intakes.enumerated() where outcomes[index] == nil {
            for (position, op) in intake.ops.enumerated() {
                for sha256 in op.data?.referencedBlobs ?? [] {
                    // A first push to a personal space not made yet: it holds no file.
                    wanted.append((index, position, intake.spaceID ?? spaces[intake.user], sha256))
                }
            }
        }
        guard !wanted.isEmpty else { return }
        struct Held: Hashable { let space: SpaceID?, sha256: String }
        var held = Set<Held>()
        for row in try connection.execute("""
            WITH k AS (
              SELECT b.space_id, b.sha256 FROM blobs b
              JOIN unnest(\(wanted.map(\.space)), \(wanted.map(\.sha256))) AS w(space_id, sha256)
                USING (space_id, sha256)
              ORDER BY b.space_id, b.sha256 FOR NO KEY UPDATE OF b)
            UPDATE blobs b SET claimed_at = clock_timestamp() FROM k
            WHERE b.space_id = k.space_id AND b.sha256 = k.sha256
            RETURNING b.space_id, b.sha256
            """) {
            let (space, sha256) = try row.decode((SpaceID, String).self)
            held.insert(Held(space: space, sha256: sha256))
        }
        for item in wanted where outcomes[item.index] == nil && !held.contains(Held(space: item.space, sha256: item.sha256)) {
            outcomes[item.index] = .blobMissing(op: item.op, sha256: item.sha256)
        }
    }

    /// The job an intake's idempotency key already names in its space.
    private static func existing(_ connection: PGConnection, _ intake: Intake) throws -> IntakeOutcome? {
        guard let key = intake.idempotencyKey else { return nil }
        let space = try intake.spaceID ?? SpaceStore.personalSpace(connection, user: intake.user)
        guard let row = try connection.execute("""
            SELECT job_id, status, op_count, request_hash FROM jobs
            WHERE space_id = \(space) AND user_id = \(intake.user) AND idempotency_key = \(key)
            """).first else { return nil }
        let (jobID, status, ops, storedHash) = try row.decode((JobID, String, Int, String?).self)
        guard storedHash == intake.requestHash else { return .keyReused }
        return .existing(jobID: jobID, status: JobStatus(rawValue: status) ?? .queued, ops: ops)
    }

    /// The user's job, in `space` (nil: their personal space first, then any: a job asked
    /// for by its id alone). Another user's job is filtered out by the statements
    /// themselves, so it is answered with the same work, and in the same time, as an
    /// unknown id (isolation).
    public func view(user: UserID, job id: JobID, space: SpaceID? = nil) async throws -> JobView? {
        if let found = try await pool.execute("""
            \(sql: ViewRow.selection) FROM jobs
            WHERE space_id = coalesce(\(space), (SELECT space_id FROM spaces WHERE personal_of = \(user)))
              AND job_id = \(id) AND user_id = \(user)
            """).first {
            return try Self.view(found).job
        }
        guard space == nil else { return nil }
        return try await pool.execute("\(sql: ViewRow.selection) FROM jobs WHERE job_id = \(id) AND user_id = \(user)")
            .first.map { try Self.view($0).job }
    }

    /// A job regardless of its owner (operators' tools).
    public func view(job id: JobID) async throws -> (user: UserID, job: JobView)? {
        try await pool.execute("\(sql: ViewRow.selection) FROM jobs WHERE job_id = \(id)").first.map(Self.view)
    }

    /// A job as the views read it, each column named once: the select list is its coding
    /// keys, and the row is decoded by those names.
    struct ViewRow: Decodable {
        let jobID: String
        let userID: UserID
        let spaceID: String?
        let status: String
        let attempts: Int
        let attemptLog: String
        let createdAt: String
        let finishedAt: String?
        let lastError: String?
        let checkpoint: Int64?
        let results: String?
        /// The ids of the job's ops, in order, which the stored results answer.
        let opIDs: String?
        let rulesVersion: Int64?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case jobID = "job_id", userID = "user_id", spaceID = "space_id", status, attempts, attemptLog = "attempt_log"
            case createdAt = "created_at", finishedAt = "finished_at", lastError = "last_error", checkpoint, results
            case opIDs = "op_ids", rulesVersion = "rules_version"
        }

        /// The select list: every key's column, times as RFC 3339 text.
        static let selection = "SELECT " + CodingKeys.allCases.map { key in
            switch key {
            case .createdAt, .finishedAt: "syncline_rfc3339(\(key.rawValue)) AS \(key.rawValue)"
            case .opIDs: "CASE WHEN results IS NOT NULL THEN jsonb_path_query_array(ops, '$[*].op_id') END AS op_ids"
            default: key.rawValue
            }
        }.joined(separator: ", ")
    }

    static func view(_ found: PGRows.Row) throws -> (user: UserID, job: JobView) {
        let row = try found.decode(as: ViewRow.self)
        let status = JobStatus(rawValue: row.status) ?? .queued
        let log = try JSONCoding.decode([AttemptView].self, from: row.attemptLog)
        let opIDs = try row.opIDs.map { try JSONCoding.decode([String].self, from: $0) } ?? []
        let results = try row.results.map { try OpResult.decodeStored($0, opIDs: opIDs) } ?? []
        return (row.userID, JobView(
            jobID: row.jobID, status: status, attempts: row.attempts, attemptLog: log, createdAt: row.createdAt,
            finishedAt: row.finishedAt, lastError: row.lastError, checkpoint: row.checkpoint.map(String.init),
            results: status == .succeeded ? results : [], spaceID: row.spaceID,
            rulesVersion: status == .succeeded ? row.rulesVersion ?? 0 : nil))
    }

    /// Records that these jobs' messages were confirmed. Only a job still `queued` can be
    /// relayed, so only those rows are rewritten: under a load the workers keep up with,
    /// most jobs are applied before the relay's next pass and their rows are left alone.
    public func markPublished(_ jobs: [JobRef]) async throws {
        guard !jobs.isEmpty else { return }
        try await pool.execute("""
            UPDATE jobs SET published_at = clock_timestamp()
            FROM unnest(\(jobs.map(\.space)), \(jobs.map(\.job))) AS r(space_id, job_id)
            WHERE jobs.space_id = r.space_id AND jobs.job_id = r.job_id
              AND status = \(literal: JobStatus.queued) AND published_at IS NULL
            """)
    }

    /// Queued jobs nobody has confirmed publishing, older than `age` seconds. (The status
    /// is a literal: the `jobs_unpublished` partial index is for it.)
    public func unpublished(olderThan age: Double, limit: Int) async throws -> [(job: JobRef, traceID: String?, ops: Int)] {
        try await pool.execute("""
            SELECT space_id, job_id, trace_id, op_count FROM jobs
            WHERE status = \(literal: JobStatus.queued) AND published_at IS NULL
              AND created_at < clock_timestamp() - make_interval(secs => \(age))
            ORDER BY created_at LIMIT \(limit)
            """).map { row in
            let (space, id, trace, ops) = try row.decode((SpaceID, JobID, String?, Int).self)
            return (JobRef(space: space, job: id), trace, ops)
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
