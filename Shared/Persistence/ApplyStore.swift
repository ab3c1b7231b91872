import Foundation
import PQBridge
import SyncModels

/// The worker's side of the database: one job, or a batch of jobs, applied in one transaction.
public struct ApplyStore: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    public enum Outcome: Sendable, Equatable {
        /// The pusher is not among the space's members when they were removed since intake.
        case succeeded(Applied)
        /// Another delivery already finished it (or an operator discarded it).
        case alreadyFinished(JobStatus)
        case unknownJob
    }

    /// Records the start of an attempt; nil when the job is unknown or already terminal.
    public func beginAttempt(jobID: String) async throws -> Int? {
        try await pool.query("""
            UPDATE jobs SET status = 'processing', attempts = attempts + 1,
              attempt_log = attempt_log || jsonb_build_array(jsonb_build_object(
                'attempt', attempts + 1, 'started_at', syncline_rfc3339(clock_timestamp()),
                'finished_at', NULL, 'error', NULL))
            WHERE job_id = $1 AND status IN ('queued', 'processing', 'retrying')
            RETURNING attempts
            """, [jobID]).first?.optionalInt("attempts").map(Int.init)
    }

    /// SQL for `attempt_log` with its last, still open attempt closed now (with `error`,
    /// an SQL expression, when given). A log that is empty or already closed stays as is.
    static func closingLastAttempt(error: String?) -> String {
        let fields = "'finished_at', syncline_rfc3339(clock_timestamp())" + (error.map { ", 'error', \($0)" } ?? "")
        return """
            CASE WHEN jsonb_array_length(attempt_log) = 0 OR (attempt_log -> -1 ->> 'finished_at') IS NOT NULL
              THEN attempt_log
              ELSE jsonb_set(attempt_log, ARRAY[(jsonb_array_length(attempt_log) - 1)::text],
                (attempt_log -> -1) || jsonb_build_object(\(fields)))
            END
            """
    }

    /// Whether the job exists and, if so, its status.
    public func status(jobID: String) async throws -> JobStatus? {
        guard let id = Names.canonicalUUID(jobID) else { return nil }
        return try await pool.query("SELECT status FROM jobs WHERE job_id = $1", [id]).first
            .flatMap { $0["status"] }.flatMap(JobStatus.init(rawValue:))
    }

    /// Takes back an attempt the database outage interrupted: it stays in the log, closed
    /// with the error, but does not count towards `MAX_ATTEMPTS`.
    public func releaseAttempt(jobID: String, error: String) async throws {
        try await pool.query("""
            UPDATE jobs SET status = 'retrying', attempts = greatest(attempts - 1, 0),
              attempt_log = \(Self.closingLastAttempt(error: "$2::text"))
            WHERE job_id = $1 AND status = 'processing'
            """, [jobID, "\(error) (not counted: database unavailable)"])
    }

    /// Whether the database answers.
    public func ping() async throws {
        try await pool.query("SELECT 1")
    }

    /// Records a failed attempt; the job waits for its next delivery as `retrying`.
    public func failAttempt(jobID: String, error: String) async throws {
        try await pool.query("""
            UPDATE jobs SET status = 'retrying', last_error = $2,
              attempt_log = \(Self.closingLastAttempt(error: "$2::text"))
            WHERE job_id = $1 AND status = 'processing'
            """, [jobID, error])
    }

    /// What applying one job left: enough for its events and metrics.
    public struct Applied: Sendable, Equatable {
        public let user: String
        public let deviceID: String
        public let checkpoint: Int64
        public let hadRejectsOrConflicts: Bool
        public let secondsSinceIntake: Double
        /// The space written to, with its members at the commit.
        public let space: String
        public let members: [String]
    }

    /// What a job of a batch came to.
    public enum BatchOutcome: Sendable, Equatable {
        case applied(Applied)
        /// Another delivery already finished it (or an operator discarded it).
        case alreadyFinished(JobStatus)
        /// Not applied here — unknown, or its ops cannot be read: the caller handles it on
        /// its own, with the attempt bookkeeping and dead-lettering of a single job.
        case alone
    }

    /// Applies every op of the job by the merge rules, under its space's counter lock (G4),
    /// remembering op_ids (G2) and storing results and checkpoint (G5), all in one
    /// transaction. The user comes from the job row, never from the message.
    public func apply(jobID: String) async throws -> Outcome {
        guard let id = Names.canonicalUUID(jobID) else { return .unknownJob }
        return try await pool.transaction { connection in
            let locked = try Self.lock(connection, jobIDs: [id])
            guard let job = locked.jobs.first else { return .unknownJob }
            if job.status.isTerminal { return .alreadyFinished(job.status) }
            var counters = locked.counters
            guard let ops = Op.decodeStored(job.ops) else {
                throw PGError(code: .decoding, message: "job \(id) holds ops that cannot be read")
            }
            return .succeeded(try Self.apply(
                connection, job: job, ops: ops, counters: &counters, purgeClocks: locked.purgeClocks, attemptBegun: true))
        }
    }

    /// Applies several jobs in one transaction, in the order given, each counting its
    /// attempt in the same commit (no attempt of its own is begun first). Job rows are
    /// locked in id order, then the counters of their spaces in space order, so two
    /// workers batching overlapping spaces wait for each other instead of deadlocking.
    /// Any database error rolls back the whole batch and is thrown: the caller applies the
    /// jobs one by one instead, so a job that fails cannot fail the others.
    public func applyBatch(jobIDs: [String]) async throws -> [String: BatchOutcome] {
        let ids = jobIDs.compactMap(Names.canonicalUUID)
        return try await pool.transaction { connection in
            let locked = try Self.lock(connection, jobIDs: ids)
            var counters = locked.counters
            var outcomes: [String: BatchOutcome] = [:]
            let byID = Dictionary(locked.jobs.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
            for id in ids where outcomes[id] == nil {
                guard let job = byID[id], let ops = Op.decodeStored(job.ops) else {
                    outcomes[id] = .alone
                    continue
                }
                if job.status.isTerminal {
                    outcomes[id] = .alreadyFinished(job.status)
                    continue
                }
                outcomes[id] = .applied(try Self.apply(
                    connection, job: job, ops: ops, counters: &counters, purgeClocks: locked.purgeClocks, attemptBegun: false))
            }
            return outcomes
        }
    }

    /// A job row locked by this transaction.
    struct LockedJob {
        let id: String
        let user: String
        let space: String
        let deviceID: String
        let status: JobStatus
        let ops: String
        let author: String?
    }

    /// Locks the job rows (in id order), then — for the jobs not finished — their spaces'
    /// counter rows (in space order), created on first use (G4); one statement. Every
    /// lock is held until commit.
    static func lock(_ connection: PGConnection, jobIDs: [String]) throws
        -> (jobs: [LockedJob], counters: [String: Int64], purgeClocks: [String: Stamp])
    {
        let rows = try connection.query("""
            WITH job AS (
              SELECT job_id, user_id, space_id, device_id, status, ops, author_name FROM jobs
              WHERE job_id = ANY($1::uuid[]) ORDER BY job_id FOR UPDATE),
            counter AS (
              INSERT INTO space_counters (space_id)
              SELECT DISTINCT space_id FROM job WHERE status IN ('queued', 'processing', 'retrying') ORDER BY space_id
              ON CONFLICT (space_id) DO UPDATE SET space_id = EXCLUDED.space_id
              RETURNING space_id, counter, purge_clock)
            SELECT job.job_id, job.user_id, job.space_id, job.device_id, job.status, job.ops, job.author_name,
                   counter.counter, counter.purge_clock
            FROM job LEFT JOIN counter USING (space_id)
            """, [jobIDs]).rows
        var jobs: [LockedJob] = []
        var counters: [String: Int64] = [:]
        var purgeClocks: [String: Stamp] = [:]
        for row in rows {
            let space = try row.string("space_id")
            jobs.append(LockedJob(
                id: try row.string("job_id"), user: try row.string("user_id"), space: space,
                deviceID: try row.string("device_id"), status: JobStatus(rawValue: try row.string("status")) ?? .queued,
                ops: try row.string("ops"), author: row["author_name"]))
            if let counter = row.optionalInt("counter") { counters[space] = counter }
            if let clock = row["purge_clock"].flatMap(Stamp.init(stored:)) { purgeClocks[space] = clock }
        }
        return (jobs, counters, purgeClocks)
    }

    /// Applies one locked job whose space's counter is locked too, and advances
    /// `counters` for the next job of the same space.
    static func apply(
        _ connection: PGConnection, job: LockedJob, ops stored: [Op], counters: inout [String: Int64],
        purgeClocks: [String: Stamp], attemptBegun: Bool
    ) throws -> Applied {
        var ops = stored
        let space = job.space
        // After the counter lock: the fork sources, then in one statement the op_ids
        // already remembered, the records the ops touch (own fork sources included) and
        // the space's members (a statement after the lock sees every earlier commit).
        let sources = try forkSources(connection, space: space, ops: ops)
        var keys = Set(ops.map { RecordKey(collection: $0.collection, id: $0.id) })
        for case .own(let key) in sources.values { keys.insert(key) }
        let (known, records, members) = try loadState(connection, space: space, opIDs: ops.map(\.opID), keys: Array(keys))
        // Membership is checked again here (G6): a pusher removed, or made a viewer, since
        // intake has every op rejected, and nothing of theirs lands.
        if members[job.user]?.canWrite != true {
            for index in ops.indices where ops[index].rejected == nil { ops[index].rejected = RejectReason.forbidden }
        }
        let owners = try publicIDOwners(connection, space: space, ops: ops)

        let outcome = JobApplier.apply(
            ops: ops, records: records, knownOpIDs: known, counter: counters[space] ?? 0, deviceID: job.deviceID,
            publicIDOwners: owners, purgeClock: purgeClocks[space], forkSources: sources)

        let finished = try saveOutcome(
            connection, space: space, jobID: job.id, outcome: outcome, author: job.author, attemptBegun: attemptBegun)
        try countForks(connection, space: space, user: job.user, forked: outcome.forked)
        counters[space] = outcome.counter
        return Applied(
            user: job.user, deviceID: job.deviceID, checkpoint: outcome.counter,
            hadRejectsOrConflicts: outcome.results.contains { $0.status == .rejected || $0.status == .conflict },
            secondsSinceIntake: finished.first?["latency"].flatMap(Double.init) ?? 0,
            space: space, members: members.keys.sorted())
    }

    /// Who holds each public id the job's publish ops name: a record of this space, or
    /// (nil) one of another space. Each id is locked for the rest of the transaction first,
    /// in order, so two users publishing the same id at once are serialized and exactly one
    /// gets it.
    static func publicIDOwners(_ connection: PGConnection, space: String, ops: [Op]) throws -> [String: RecordKey?] {
        let ids = Array(Set(ops.filter { $0.type == .publish && $0.rejected == nil }.compactMap(\.publicID))).sorted()
        guard !ids.isEmpty else { return [:] }
        try connection.query(
            "SELECT pg_advisory_xact_lock(hashtextextended('syncline.public_id:' || id, 0)) FROM unnest($1::text[]) AS id",
            [ids])
        var owners: [String: RecordKey?] = [:]
        for row in try connection.query(
            "SELECT public_id, space_id, collection, record_id FROM records WHERE public_id = ANY($1::text[])", [ids]
        ).rows {
            let key = try row.string("space_id") == space
                ? RecordKey(collection: try row.string("collection"), id: try row.string("record_id")) : nil
            owners[try row.string("public_id")] = .some(key)
        }
        return owners
    }

    /// What each public id the job's fork ops name holds: a record of this space (the
    /// applier reads it as the job leaves it), or another space's readable record.
    static func forkSources(_ connection: PGConnection, space: String, ops: [Op]) throws -> [String: ForkSource] {
        let ids = Array(Set(ops.filter { $0.type == .fork }.compactMap(\.publicID)))
        guard !ids.isEmpty else { return [:] }
        var sources: [String: ForkSource] = [:]
        for row in try connection.query("""
            SELECT public_id, space_id, collection, record_id, data::text AS data, can_fork FROM records
            WHERE public_id = ANY($1::text[]) AND (space_id = $2 OR visibility <> 'private')
            """, [ids, space]).rows {
            let key = RecordKey(collection: try row.string("collection"), id: try row.string("record_id"))
            let owner = try row.string("space_id")
            sources[try row.string("public_id")] = owner == space
                ? .own(key)
                : .other(
                    space: owner, key: key, data: try JSONParser.parse(try row.string("data")).objectValue ?? [:],
                    canFork: row["can_fork"] == "t")
        }
        return sources
    }

    /// Raises each forked record's `fork_count`, once per forking user.
    static func countForks(_ connection: PGConnection, space: String, user: String, forked: Set<ForkedRecord>) throws {
        guard !forked.isEmpty else { return }
        let sources = forked.map { (space: $0.space ?? space, key: $0.key) }
            .sorted { ($0.space, $0.key) < ($1.space, $1.key) }
        try connection.query("""
            WITH counted AS (
              INSERT INTO forks (source_space_id, source_collection, source_record_id, user_id)
              SELECT s, c, i, $1 FROM unnest($2::uuid[], $3::text[], $4::text[]) AS s(s, c, i)
              ON CONFLICT DO NOTHING
              RETURNING source_space_id, source_collection, source_record_id)
            UPDATE records r SET fork_count = r.fork_count + 1
            FROM counted f
            WHERE r.space_id = f.source_space_id AND r.collection = f.source_collection AND r.record_id = f.source_record_id
            """, [user, sources.map(\.space), sources.map(\.key.collection), sources.map(\.key.id)])
    }

    /// The op_ids among `opIDs` already remembered in the space, the space's records with
    /// these keys, and its members with their roles — one statement (rows of kind `o`, `r`
    /// and `m`).
    static func loadState(
        _ connection: PGConnection, space: String, opIDs: [String], keys: [RecordKey]
    ) throws -> (known: Set<String>, records: [RecordKey: StoredRecord], members: [String: SpaceRole]) {
        let rows = try connection.query("""
            SELECT 'o' AS kind, op_id::text AS collection, NULL AS record_id, NULL::bigint AS version, NULL AS data,
                   NULL AS field_clocks, NULL AS floor_clock, NULL AS write_clock, NULL AS delete_clock,
                   NULL::uuid AS updated_by, NULL AS public_id, NULL::boolean AS can_fork, NULL AS visibility_clock,
                   NULL::boolean AS listed, NULL AS forked_from, NULL AS fork_clock, NULL AS published_at
            FROM op_ids WHERE space_id = $1 AND op_id = ANY($2::uuid[])
            UNION ALL
            SELECT 'm', user_id, role, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
            FROM space_members WHERE space_id = $1
            UNION ALL
            SELECT 'r', r.collection, r.record_id, r.version, r.data::text, r.field_clocks::text, r.floor_clock,
                   r.write_clock, r.delete_clock, r.updated_by, r.public_id, r.can_fork, r.visibility_clock,
                   r.listed, r.forked_from, r.fork_clock, syncline_rfc3339(r.published_at)
            FROM records r
            JOIN unnest($3::text[], $4::text[]) AS k(collection, record_id)
              ON r.collection = k.collection AND r.record_id = k.record_id
            WHERE r.space_id = $1
            """, [space, opIDs, keys.map(\.collection), keys.map(\.id)]).rows
        var known = Set<String>()
        var records: [RecordKey: StoredRecord] = [:]
        var members: [String: SpaceRole] = [:]
        for row in rows {
            switch row["kind"] {
            case "o":
                known.insert(try row.string("collection"))
                continue
            case "m":
                members[try row.string("collection")] = SpaceRole(rawValue: try row.string("record_id"))
                continue
            default: break
            }
            let key = RecordKey(collection: try row.string("collection"), id: try row.string("record_id"))
            let clocks = try JSONParser.parse(try row.string("field_clocks")).objectValue ?? [:]
            let state = RecordState(
                fields: try JSONParser.parse(try row.string("data")).objectValue ?? [:],
                fieldClocks: clocks.compactMapValues { $0.stringValue.flatMap(Stamp.init(stored:)) },
                floor: row["floor_clock"].flatMap(Stamp.init(stored:)),
                writeClock: row["write_clock"].flatMap(Stamp.init(stored:)),
                deleteClock: row["delete_clock"].flatMap(Stamp.init(stored:)),
                visibility: row["visibility_clock"].flatMap(Stamp.init(stored:)).map {
                    RecordState.Visibility(
                        publicID: row["public_id"], canFork: row["can_fork"] == "t", listed: row["listed"] != "f", clock: $0)
                },
                fork: row["fork_clock"].flatMap(Stamp.init(stored:)).flatMap { clock in
                    row["forked_from"].map { RecordState.Fork(publicID: $0, clock: clock) }
                })
            records[key] = StoredRecord(
                key: key, version: try row.int("version"), state: state, updatedBy: row["updated_by"],
                publishedAt: row["published_at"])
        }
        return (known, records, members)
    }

    /// Every write of the job in one statement: the remembered op_ids, the changed records
    /// (`visibility` is what readers see; a record that readers start to see, or under a
    /// new public id, is stamped `published_at` now, with `author`, the publishing token's
    /// name), the space's counter, and the job itself — `succeeded`, with results and
    /// checkpoint. Returns the job's push→applied seconds.
    static func saveOutcome(
        _ connection: PGConnection, space: String, jobID: String, outcome: JobApplier.Outcome, author: String?,
        attemptBegun: Bool
    ) throws -> PGResult {
        // An attempt begun in a commit of its own is closed; one made inside a batch is
        // counted and logged whole, started when the batch's transaction did.
        let attempt = attemptBegun
            ? "attempt_log = \(Self.closingLastAttempt(error: nil))"
            : """
              attempts = attempts + 1,
              attempt_log = attempt_log || jsonb_build_array(jsonb_build_object(
                'attempt', attempts + 1, 'started_at', syncline_rfc3339(now()),
                'finished_at', syncline_rfc3339(clock_timestamp()), 'error', NULL))
              """
        let sorted = outcome.changed.values.sorted { $0.key < $1.key }
        func column<Value: PGArrayElement>(_ value: (StoredRecord) throws -> Value) rethrows -> [Value] { try sorted.map(value) }
        return try connection.query("""
            WITH remembered AS (
              INSERT INTO op_ids (space_id, op_id, job_id)
              SELECT $1::uuid, unnest($19::uuid[]), $16 ON CONFLICT DO NOTHING),
            saved AS (
              INSERT INTO records (space_id, collection, record_id, version, deleted, data, field_clocks,
                                   floor_clock, write_clock, delete_clock, updated_by, updated_at,
                                   visibility, public_id, can_fork, visibility_clock, published_at, author,
                                   listed, forked_from, fork_clock)
              SELECT $1::uuid, c, i, v, d, data::jsonb, clocks::jsonb, f, w, x, b, clock_timestamp(),
                     vis, p, k, vc,
                     CASE WHEN vis = 'private' THEN NULL ELSE clock_timestamp() END, CASE WHEN p IS NULL THEN NULL ELSE $15 END,
                     l, ff, fc
              FROM unnest($2::text[], $3::text[], $4::bigint[], $5::boolean[], $6::text[], $7::text[],
                          $8::text[], $9::text[], $10::text[], $11::uuid[], $12::text[], $13::boolean[], $14::text[],
                          $20::text[], $21::boolean[], $22::text[], $23::text[])
                   AS u(c, i, v, d, data, clocks, f, w, x, b, p, k, vc, vis, l, ff, fc)
              ON CONFLICT (space_id, collection, record_id) DO UPDATE SET
                updated_at = CASE WHEN records.version <> EXCLUDED.version THEN EXCLUDED.updated_at ELSE records.updated_at END,
                updated_by = EXCLUDED.updated_by,
                version = EXCLUDED.version, deleted = EXCLUDED.deleted, data = EXCLUDED.data,
                field_clocks = EXCLUDED.field_clocks, floor_clock = EXCLUDED.floor_clock,
                write_clock = EXCLUDED.write_clock, delete_clock = EXCLUDED.delete_clock,
                visibility = EXCLUDED.visibility, can_fork = EXCLUDED.can_fork, visibility_clock = EXCLUDED.visibility_clock,
                listed = EXCLUDED.listed, forked_from = EXCLUDED.forked_from, fork_clock = EXCLUDED.fork_clock,
                published_at = CASE WHEN EXCLUDED.visibility = 'private' THEN NULL
                                    WHEN records.visibility <> 'private'
                                         AND records.public_id IS NOT DISTINCT FROM EXCLUDED.public_id THEN records.published_at
                                    ELSE EXCLUDED.updated_at END,
                author = CASE WHEN records.public_id IS DISTINCT FROM EXCLUDED.public_id
                              THEN coalesce(EXCLUDED.author, records.author)
                              ELSE coalesce(records.author, EXCLUDED.author) END,
                public_id = EXCLUDED.public_id),
            counter AS (UPDATE space_counters SET counter = $17 WHERE space_id = $1 AND counter <> $17)
            UPDATE jobs SET status = 'succeeded', checkpoint = $17, results = $18::jsonb,
              finished_at = clock_timestamp(), last_error = NULL, \(attempt)
            WHERE job_id = $16
            RETURNING extract(epoch FROM finished_at - created_at)::float8 AS latency
            """, [
                space,
                column(\.key.collection), column(\.key.id), column(\.version), column(\.state.deleted),
                column { JSONWriter.string(.object($0.state.fields)) },
                column { JSONWriter.string(.object($0.state.fieldClocks.mapValues { .string($0.description) })) },
                column { $0.state.floor?.description }, column { $0.state.writeClock?.description },
                column { $0.state.deleteClock?.description }, column(\.updatedBy),
                column { $0.state.visibility?.publicID }, column { $0.state.visibility?.canFork == true },
                column { $0.state.visibility?.clock.description }, author,
                jobID, outcome.counter, try JSONCoding.encodeString(outcome.results), outcome.remembered,
                column(\.state.publicVisibility.rawValue), column { $0.state.visibility?.listed != false },
                column { $0.state.fork?.publicID }, column { $0.state.fork?.clock.description },
            ])
    }
}
