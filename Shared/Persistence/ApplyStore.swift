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
        public internal(set) var secondsSinceIntake: Double
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
            guard let ops = Op.decodeStored(job.ops) else {
                throw PGError(code: .decoding, message: "job \(id) holds ops that cannot be read")
            }
            var counters = locked.counters
            let applied = try Self.applyTogether(
                connection, [(job, ops)], counters: &counters, purgeClocks: locked.purgeClocks, attemptBegun: true)
            guard let outcome = applied[id] else { throw PGError(code: .decoding, message: "job \(id) was not saved") }
            return .succeeded(outcome)
        }
    }

    /// Applies several jobs in one transaction, in the order given, each counting its
    /// attempt in the same commit (no attempt of its own is begun first). Job rows are
    /// locked in id order, then the counters of their spaces in space order, so two
    /// workers batching overlapping spaces wait for each other instead of deadlocking.
    /// Consecutive jobs that only upsert, patch or delete are read and written together;
    /// a job that publishes or forks reads beyond its records, so it goes alone, after
    /// the jobs before it are written.
    /// Any database error rolls back the whole batch and is thrown: the caller applies the
    /// jobs one by one instead, so a job that fails cannot fail the others.
    public func applyBatch(jobIDs: [String]) async throws -> [String: BatchOutcome] {
        let ids = jobIDs.compactMap(Names.canonicalUUID)
        return try await pool.transaction { connection in
            let locked = try Self.lock(connection, jobIDs: ids)
            var counters = locked.counters
            var outcomes: [String: BatchOutcome] = [:]
            let byID = Dictionary(locked.jobs.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
            var together: [(LockedJob, [Op])] = []
            func flush() throws {
                guard !together.isEmpty else { return }
                for (id, applied) in try Self.applyTogether(
                    connection, together, counters: &counters, purgeClocks: locked.purgeClocks, attemptBegun: false) {
                    outcomes[id] = .applied(applied)
                }
                together = []
            }
            var seen = Set<String>()
            for id in ids where seen.insert(id).inserted {
                guard let job = byID[id], let ops = Op.decodeStored(job.ops) else {
                    outcomes[id] = .alone
                    continue
                }
                if job.status.isTerminal {
                    outcomes[id] = .alreadyFinished(job.status)
                } else if Self.readsOnlyItsRecords(ops) {
                    together.append((job, ops))
                } else {
                    try flush()
                    together = [(job, ops)]
                    try flush()
                }
            }
            try flush()
            return outcomes
        }
    }

    /// Whether a job's ops read and write nothing but their own records (no publish,
    /// unpublish or fork), so it can be applied together with others.
    static func readsOnlyItsRecords(_ ops: [Op]) -> Bool {
        ops.allSatisfy { $0.type == .upsert || $0.type == .patch || $0.type == .delete }
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

    /// Applies locked jobs, in order, whose spaces' counters are locked too: one statement
    /// reads everything they touch (op_ids, records, members), the merge runs in memory —
    /// each job seeing what the ones before it wrote — and one statement writes it all.
    /// A job that publishes or forks must come alone (see `applyBatch`). Advances
    /// `counters`; returns each job's outcome.
    static func applyTogether(
        _ connection: PGConnection, _ jobs: [(job: LockedJob, ops: [Op])], counters: inout [String: Int64],
        purgeClocks: [String: Stamp], attemptBegun: Bool
    ) throws -> [String: Applied] {
        // After the counter locks: fork sources, then everything else in one statement (a
        // statement after the lock sees every earlier commit).
        var sources: [String: [String: ForkSource]] = [:]
        var reads = StateReads()
        for (job, ops) in jobs {
            let jobSources = try forkSources(connection, space: job.space, ops: ops)
            sources[job.id] = jobSources
            reads.spaces.insert(job.space)
            for op in ops {
                reads.opIDs.append((job.space, op.opID))
                reads.keys.insert(SpaceKey(space: job.space, key: RecordKey(collection: op.collection, id: op.id)))
            }
            for case .own(let key) in jobSources.values { reads.keys.insert(SpaceKey(space: job.space, key: key)) }
        }
        var states = try loadState(connection, reads)

        var writes = StateWrites()
        var forks: [(space: String, user: String, forked: Set<ForkedRecord>)] = []
        var applied: [String: Applied] = [:]
        for (job, stored) in jobs {
            var ops = stored
            var state = states.removeValue(forKey: job.space) ?? SpaceState()
            // Membership is checked again here (G6): a pusher removed, or made a viewer, since
            // intake has every op rejected, and nothing of theirs lands.
            if state.members[job.user]?.canWrite != true {
                for index in ops.indices where ops[index].rejected == nil { ops[index].rejected = RejectReason.forbidden }
            }
            let owners = try publicIDOwners(connection, space: job.space, ops: ops)
            // The space's records are handed over, not shared, so the merge updates them in
            // place instead of copying them for every job.
            let records = state.records
            state.records = [:]
            let outcome = JobApplier.apply(
                ops: ops, records: consume records, knownOpIDs: state.known, counter: counters[job.space] ?? 0,
                deviceID: job.deviceID, publicIDOwners: owners, purgeClock: purgeClocks[job.space],
                forkSources: sources[job.id] ?? [:])
            state.records = outcome.records
            for (key, record) in outcome.changed { writes.records[SpaceKey(space: job.space, key: key)] = (record, job.author, job.user) }
            state.known.formUnion(outcome.remembered)
            states[job.space] = state
            counters[job.space] = outcome.counter
            writes.counters[job.space] = outcome.counter
            writes.opIDs += outcome.remembered.map { (job.space, $0, job.id) }
            writes.jobs.append((job.id, outcome.counter, try OpResult.encodeStored(outcome.results)))
            forks.append((job.space, job.user, outcome.forked))
            applied[job.id] = Applied(
                user: job.user, deviceID: job.deviceID, checkpoint: outcome.counter,
                hadRejectsOrConflicts: outcome.results.contains { $0.status == .rejected || $0.status == .conflict },
                secondsSinceIntake: 0, space: job.space, members: state.members.keys.sorted())
        }
        for (id, latency) in try save(connection, writes, attemptBegun: attemptBegun) { applied[id]?.secondsSinceIntake = latency }
        for fork in forks { try countForks(connection, space: fork.space, user: fork.user, forked: fork.forked) }
        return applied
    }
}
