import Foundation
import PQBridge
import SyncModels

/// The worker's side of the database: jobs applied together in one transaction. A job on
/// its own is a batch of one, on the same code.
public struct ApplyStore: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    /// How the attempt of the jobs being applied is counted.
    public enum Attempt: Sendable {
        /// Counted and logged whole by the applying commit: nothing is written before it.
        /// The way every job is first tried.
        case countedInCommit
        /// Begun by `beginAttempt` in a commit of its own, closed by the applying commit:
        /// how a job is tried alone after a batch failed, so that an attempt that fails
        /// still counts.
        case begun

        /// The SQL assignments that log a succeeding attempt of this kind.
        var logged: String {
            switch self {
            case .begun:
                "attempt_log = \(ApplyStore.closingLastAttempt(error: nil))"
            case .countedInCommit:
                // Started when the transaction did.
                """
                attempts = attempts + 1,
                attempt_log = attempt_log || jsonb_build_array(jsonb_build_object(
                  'attempt', attempts + 1, 'started_at', syncline_rfc3339(now()),
                  'finished_at', syncline_rfc3339(clock_timestamp()), 'error', NULL))
                """
            }
        }
    }

    /// What a job came to.
    public enum Outcome: Sendable, Equatable {
        case applied(Applied)
        /// Another delivery already finished it (or an operator discarded it).
        case alreadyFinished(JobStatus)
        /// No job row has this id.
        case unknownJob
        /// Its stored ops cannot be read: no attempt can apply it.
        case unreadable
        /// It holds calls: its hooks must answer them first (outside any transaction), then
        /// it is applied again with their verdicts. Nothing was written for it.
        case needsHooks(HookWork)
    }

    /// A job's calls, as its hooks are asked about them.
    public struct HookWork: Sendable, Equatable {
        public let jobID: JobID
        public let space: SpaceID
        public let user: UserID
        /// The pusher's role in the space; nil when they are no longer a member (then no
        /// hook is asked: every op is refused).
        public let role: SpaceRole?
        /// The calls not already refused, in order, each with its record as it stands.
        public let calls: [Call]

        public struct Call: Sendable, Equatable {
            public let op: Op
            public let record: RecordView?
        }
    }

    /// What applying one job left: enough for its events and metrics.
    public struct Applied: Sendable, Equatable {
        public let user: UserID
        public let deviceID: DeviceID
        public let checkpoint: Int64
        public let hadRejectsOrConflicts: Bool
        public internal(set) var secondsSinceIntake: Double
        /// The space written to, with its members at the commit. The pusher is not among
        /// them when they were removed since intake.
        public let space: SpaceID
        public let members: [UserID]
    }

    /// Applies the jobs in one transaction, in the order given: every op by the merge
    /// rules, under its space's counter lock (no missed changes), remembering op_ids (each op takes effect at most once) and storing
    /// results and checkpoint (read your writes). The user, device, space and ops come from the job rows,
    /// never from a message (whose space only finds the row: a wrong one finds none). Job
    /// rows are locked in id order, then the counters of their spaces in space order, so two workers with overlapping spaces wait for each other
    /// instead of deadlocking. Consecutive jobs that only upsert, patch or delete are read
    /// and written together; a job that publishes or forks reads beyond its records, so it
    /// goes alone, after the jobs before it are written.
    ///
    /// Any database error rolls back every job and is thrown: the caller then applies them
    /// one by one, so that a job that fails cannot fail the others.
    ///
    /// `rules`: the app's rules as the caller last knew them. The transaction reads the
    /// current version under its locks, and a newer one is loaded there and handed to
    /// `adopt`: every job is judged by the version current when it is applied (stored with
    /// it). `hookVerdicts`: per job, what its hooks answered each call, its ops' ids and
    /// clocks given; a job with calls and no verdicts comes back as `needsHooks`.
    public func apply(
        jobs refs: [JobRef], attempt: Attempt, rules known: Rules = .none,
        hookVerdicts: [JobID: [String: HookExchange.Verdict]] = [:], adopt: @escaping @Sendable (Rules) -> Void = { _ in }
    ) async throws -> [JobID: Outcome] {
        var seen = Set<JobRef>()
        let unique = refs.filter { seen.insert($0).inserted }
        let unknown = Dictionary(refs.map { ($0.job, Outcome.unknownJob) }, uniquingKeysWith: { first, _ in first })
        guard !unique.isEmpty else { return unknown }
        return try await pool.transaction { connection in
            var outcomes = unknown
            let locked = try Self.lock(connection, jobs: unique)
            var rules = known
            if let current = locked.rulesVersion, current != known.version {
                rules = try RulesStore.current(connection)
                adopt(rules)
            }
            var counters = locked.counters
            var together: [(LockedJob, [Op])] = []
            func flush() throws {
                guard !together.isEmpty else { return }
                for (job, applied) in try Self.applyTogether(
                    connection, together, counters: &counters, purgeClocks: locked.purgeClocks, attempt: attempt, rules: rules,
                    hookVerdicts: hookVerdicts) {
                    outcomes[job] = .applied(applied)
                }
                together = []
            }
            for ref in unique {
                guard let job = locked.jobs[ref.job] else { continue }
                if job.status.isTerminal {
                    outcomes[ref.job] = .alreadyFinished(job.status)
                } else if let ops = Op.decodeStored(job.ops) {
                    let calls = ops.filter { $0.type == .call && $0.rejected == nil }
                    if !calls.isEmpty, hookVerdicts[ref.job] == nil {
                        outcomes[ref.job] = .needsHooks(try Self.hookWork(connection, job, calls: calls))
                    } else if Self.readsOnlyItsRecords(ops) {
                        together.append((job, ops))
                    } else {
                        try flush()
                        together = [(job, ops)]
                        try flush()
                    }
                } else {
                    outcomes[ref.job] = .unreadable
                }
            }
            try flush()
            return outcomes
        }
    }

    /// Whether a job's ops read and write nothing but their own records (no publish,
    /// unpublish, fork or call), so it can be applied together with others.
    static func readsOnlyItsRecords(_ ops: [Op]) -> Bool {
        ops.allSatisfy { [.upsert, .patch, .delete, .increment, .add, .remove].contains($0.type) }
    }

    /// Applies locked jobs, in order, whose spaces' counters are locked too: one statement
    /// reads the records they touch, one the op_ids already seen and the members, the
    /// merge runs in memory — each job seeing what the ones before it wrote — and one
    /// statement writes it all. A job that publishes or forks must come alone (see
    /// `apply`). Advances `counters`; returns each job's outcome.
    static func applyTogether(
        _ connection: PGConnection, _ jobs: [(job: LockedJob, ops: [Op])], counters: inout [SpaceID: Int64],
        purgeClocks: [SpaceID: Stamp], attempt: Attempt, rules: Rules, hookVerdicts: [JobID: [String: HookExchange.Verdict]] = [:]
    ) throws -> [JobID: Applied] {
        let (reads, sources) = try stateReads(connection, jobs, hookVerdicts: hookVerdicts)
        var states = try loadState(connection, reads)
        var writes = StateWrites(rulesVersion: rules.version)
        var referencedBefore: [SpaceKey: Set<String>] = [:]
        for (space, state) in states {
            for key in state.records.keys { writes.stored.insert(SpaceKey(space: space, key: key)) }
            for (key, blobs) in state.blobRefs { referencedBefore[SpaceKey(space: space, key: key)] = blobs }
        }
        var forks: [(space: SpaceID, user: UserID, forked: Set<ForkedRecord>)] = []
        var applied: [JobID: Applied] = [:]
        for (job, stored) in jobs {
            var state = states.removeValue(forKey: job.space) ?? SpaceState()
            let ops = Self.admitted(stored, of: job, in: state)
            let owners = try publicIDOwners(connection, space: job.space, ops: ops, busySpaces: Set(counters.keys))
            // The space's records are handed over, not shared, so the merge updates them in
            // place instead of copying them for every job.
            let records = state.records
            state.records = [:]
            let outcome = JobApplier.apply(
                ops: ops, records: consume records, knownOpIDs: state.known, counter: counters[job.space] ?? 0,
                deviceID: job.deviceID.description, publicIDOwners: owners, purgeClock: purgeClocks[job.space],
                forkSources: sources[job.id] ?? [:],
                judge: state.members[job.user].map { RulesJudge(rules: rules, user: job.user, role: $0) },
                hookVerdicts: hookVerdicts[job.id] ?? [:])
            state.records = outcome.records
            state.known.formUnion(outcome.remembered)
            states[job.space] = state
            counters[job.space] = outcome.counter
            try writes.add(outcome, of: job)
            forks.append((job.space, job.user, outcome.forked))
            applied[job.id] = Applied(
                user: job.user, deviceID: job.deviceID, checkpoint: outcome.counter,
                hadRejectsOrConflicts: outcome.results.contains { $0.status == .rejected || $0.status == .conflict },
                secondsSinceIntake: 0, space: job.space, members: state.members.keys.sorted())
        }
        countReferences(&writes, before: referencedBefore)
        for (id, latency) in try save(connection, writes, attempt: attempt) { applied[id]?.secondsSinceIntake = latency }
        for fork in forks { try countForks(connection, space: fork.space, user: fork.user, forked: fork.forked) }
        return applied
    }

    /// What the jobs read, after the counter locks: their fork sources first, then the
    /// records, op_ids and members (a statement after the lock sees every earlier commit).
    static func stateReads(
        _ connection: PGConnection, _ jobs: [(job: LockedJob, ops: [Op])], hookVerdicts: [JobID: [String: HookExchange.Verdict]]
    ) throws -> (StateReads, sources: [JobID: [String: ForkSource]]) {
        var sources: [JobID: [String: ForkSource]] = [:]
        var reads = StateReads()
        for (job, ops) in jobs {
            let jobSources = try forkSources(connection, space: job.space, ops: ops)
            sources[job.id] = jobSources
            reads.spaces.insert(job.space)
            if job.user.text.hasPrefix(ServicePrincipal.userPrefix) { reads.services.insert(job.user) }
            var answered: [Op] = []
            for case .ops(let derived) in (hookVerdicts[job.id] ?? [:]).values { answered += derived }
            for op in ops + answered {
                reads.opIDs.append((job.space, op.opID))
                reads.keys.insert(SpaceKey(space: job.space, key: RecordKey(collection: op.collection, id: op.id)))
            }
            for case .own(let key) in jobSources.values { reads.keys.insert(SpaceKey(space: job.space, key: key)) }
        }
        return (reads, sources)
    }

    /// What the hooks of a job with calls are asked: the pusher's role and each call's
    /// record as it stands now.
    static func hookWork(_ connection: PGConnection, _ job: LockedJob, calls: [Op]) throws -> HookWork {
        let role = try connection.execute(
            "SELECT role FROM space_members WHERE space_id = \(job.space)::uuid AND user_id = \(job.user)"
        ).first.flatMap { SpaceRole(rawValue: try $0.decode(String.self, at: 0)) }
        let keys = calls.map { RecordKey(collection: $0.collection, id: $0.id) }
        var records: [RecordKey: RecordView] = [:]
        for row in try connection.execute("""
            SELECT \(sql: RecordRow.selection) FROM records r
            JOIN unnest(\(keys.map(\.collection)), \(keys.map(\.id))) AS k(collection, record_id) USING (collection, record_id)
            WHERE r.space_id = \(job.space)::uuid
            """) {
            let record = try row.decode(as: RecordRow.self).stored()
            records[record.key] = record.view
        }
        return HookWork(
            jobID: job.id, space: job.space, user: job.user, role: role,
            calls: calls.map { HookWork.Call(op: $0, record: records[RecordKey(collection: $0.collection, id: $0.id)]) })
    }

    /// The job's ops as its pusher may apply them. Membership is checked again here
    /// (isolation): a pusher removed, or made a viewer, since intake has every op rejected,
    /// and nothing of theirs lands.
    static func admitted(_ ops: [Op], of job: LockedJob, in state: SpaceState) -> [Op] {
        guard state.members[job.user]?.canWrite != true else { return ops }
        var refused = ops
        for index in refused.indices where refused[index].rejected == nil { refused[index].rejected = RejectReason.forbidden }
        return refused
    }

    // MARK: - The attempt of a job tried alone

    /// Records the start of an attempt in a commit of its own; nil when the job is unknown
    /// or already finished.
    public func beginAttempt(_ job: JobRef) async throws -> Int? {
        let (space, id) = (job.space, job.job)
        return try await pool.confirmed { try $0.execute("""
            UPDATE jobs SET status = \(JobStatus.processing), attempts = attempts + 1,
              attempt_log = attempt_log || jsonb_build_array(jsonb_build_object(
                'attempt', attempts + 1, 'started_at', syncline_rfc3339(clock_timestamp()),
                'finished_at', NULL, 'error', NULL))
            WHERE space_id = \(space) AND job_id = \(id) AND status = ANY(\(JobStatus.unfinished.map(\.rawValue)))
            RETURNING attempts
            """).first?.decode(Int.self, at: 0) }
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

    /// Whether the job exists and, if so, its status. Confirmed: a worker acks or
    /// dead-letters by it, so what it read must be on a standby too when the pool waits for
    /// one (a former primary not yet fenced may hold an outcome no one else will).
    public func status(_ job: JobRef) async throws -> JobStatus? {
        let (space, id) = (job.space, job.job)
        return try await pool.confirmed {
            try $0.execute("SELECT status FROM jobs WHERE space_id = \(space) AND job_id = \(id)").first
                .flatMap { JobStatus(rawValue: try $0.decode(String.self, at: 0)) }
        }
    }

    /// The spaces of jobs named by id alone (messages published before messages named
    /// the space): a read across spaces, for those only. A job not found is left out.
    public func spaces(ofJobs ids: [JobID]) async throws -> [JobID: SpaceID] {
        guard !ids.isEmpty else { return [:] }
        var spaces: [JobID: SpaceID] = [:]
        for row in try await pool.execute("SELECT job_id, space_id FROM jobs WHERE job_id = ANY(\(ids))") {
            let (job, space) = try row.decode((JobID, SpaceID).self)
            spaces[job] = space
        }
        return spaces
    }

    /// Takes back an attempt the database outage interrupted: it stays in the log, closed
    /// with the error, but does not count towards `MAX_ATTEMPTS`.
    public func releaseAttempt(_ job: JobRef, error: String) async throws {
        try await closeAttempt(job, error: "\(error) (not counted: database unavailable)", counted: false)
    }

    /// Records a failed attempt; the job waits for its next delivery as `retrying`.
    public func failAttempt(_ job: JobRef, error: String) async throws {
        try await closeAttempt(job, error: error, counted: true)
    }

    private func closeAttempt(_ job: JobRef, error: String, counted: Bool) async throws {
        let (space, id) = (job.space, job.job)
        try await pool.execute("""
            UPDATE jobs SET status = \(JobStatus.retrying),
              \(sql: counted ? "last_error = e.text" : "attempts = greatest(attempts - 1, 0)"),
              attempt_log = \(sql: Self.closingLastAttempt(error: "e.text"))
            FROM (SELECT \(error) AS text) e
            WHERE space_id = \(space) AND job_id = \(id) AND status = \(JobStatus.processing)
            """)
    }
}
