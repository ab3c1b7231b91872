import Foundation
import PQBridge
import SyncModels

/// The statements of applying jobs: the locks, the reads and the one write of a set of
/// jobs, and what publish and fork ops read and count beyond their records.
extension ApplyStore {
    /// A job row locked by this transaction.
    struct LockedJob {
        let id: JobID
        let user: UserID
        let space: SpaceID
        let deviceID: DeviceID
        let status: JobStatus
        let ops: String
        let author: String?
    }

    /// Locks the job rows (in id order), then — for the jobs not finished — their spaces'
    /// counter rows (in space order), created on first use (no missed changes); one statement,
    /// which also reads the current version of the rules. Every lock is held until commit. A space deleted since intake gets no counter (a deletion
    /// committing meanwhile makes the insert fail on the foreign key: the jobs are then
    /// applied one by one, and each finds the space gone); its jobs find no members.
    static func lock(_ connection: PGConnection, jobs refs: [JobRef]) throws
        -> (jobs: [JobID: LockedJob], counters: [SpaceID: Int64], purgeClocks: [SpaceID: Stamp], rulesVersion: Int64?)
    {
        var jobs: [JobID: LockedJob] = [:]
        var counters: [SpaceID: Int64] = [:]
        var purgeClocks: [SpaceID: Stamp] = [:]
        var rulesVersion: Int64?
        for row in try connection.execute("""
            WITH job AS (
              SELECT job_id, user_id, space_id, device_id, status, ops, author_name FROM jobs
              WHERE (space_id, job_id) IN (
                SELECT * FROM unnest(\(refs.map(\.space)), \(refs.map(\.job))))
              ORDER BY job_id FOR UPDATE),
            counter AS (
              INSERT INTO space_counters (space_id)
              SELECT DISTINCT space_id FROM job JOIN spaces USING (space_id)
              WHERE status = ANY(\(JobStatus.unfinished.map(\.rawValue))) ORDER BY space_id
              ON CONFLICT (space_id) DO UPDATE SET space_id = EXCLUDED.space_id
              RETURNING space_id, counter, purge_clock)
            SELECT job.job_id, job.user_id, job.space_id, job.device_id, job.status, job.ops, job.author_name,
                   counter.counter, counter.purge_clock, (SELECT coalesce(max(version), 0) FROM rules)
            FROM job LEFT JOIN counter USING (space_id)
            """) {
            let (id, user, space, device, status, ops, author, counter, purgeClock, rules) =
                try row.decode((JobID, UserID, SpaceID, DeviceID, String, String, String?, Int64?, String?, Int64).self)
            rulesVersion = rules
            guard let status = JobStatus(rawValue: status) else {
                throw UnexpectedAnswer("job \(id) has status \(status)")
            }
            jobs[id] = LockedJob(id: id, user: user, space: space, deviceID: device, status: status, ops: ops, author: author)
            if let counter { counters[space] = counter }
            if let clock = purgeClock.flatMap(Stamp.init(stored:)) { purgeClocks[space] = clock }
        }
        return (jobs, counters, purgeClocks, rulesVersion)
    }

    /// Who holds each public id the job's publish ops name: a record of this space, or
    /// (nil) one of another space. Each id is locked for the rest of the transaction first,
    /// in order, so two users publishing the same id at once are serialized and exactly one
    /// gets it.
    ///
    /// A record of another space that holds its id without data (a publication waiting for
    /// its record, or a deleted record) shows readers nothing, so it must not tell a
    /// publisher anything either: it yields the id, as purge would release it, and the id
    /// counts as free. Its space's counter is taken first, without waiting — a space being
    /// applied right now (by another worker, or earlier in this transaction: `busySpaces`)
    /// keeps its id for now.
    static func publicIDOwners(
        _ connection: PGConnection, space: SpaceID, ops: [Op], busySpaces: Set<SpaceID>
    ) throws -> [String: RecordKey?] {
        let ids = Array(Set(ops.filter { $0.type == .publish && $0.rejected == nil }.compactMap(\.publicID))).sorted()
        guard !ids.isEmpty else { return [:] }
        try connection.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('syncline.public_id:' || id, 0)) FROM unnest(\(ids)) AS id")
        var owners: [String: RecordKey?] = [:]
        var withoutData: [String: SpaceID] = [:]  // public id → its holder's space
        for row in try connection.execute(
            "SELECT public_id, space_id, collection, record_id, visibility FROM records WHERE public_id = ANY(\(ids))"
        ) {
            let (publicID, owner, collection, id, visibility) = try row.decode((String, SpaceID, String, String, String).self)
            if owner == space {
                owners[publicID] = .some(RecordKey(collection: collection, id: id))
            } else if visibility == RecordState.PublicVisibility.private.rawValue, !busySpaces.contains(owner) {
                withoutData[publicID] = owner
            } else {
                owners[publicID] = .some(nil)
            }
        }
        guard !withoutData.isEmpty else { return owners }
        let idle = Set(try connection.execute("""
            SELECT space_id FROM space_counters WHERE space_id = ANY(\(Array(Set(withoutData.values)).sorted())::uuid[])
            ORDER BY space_id FOR UPDATE SKIP LOCKED
            """).map { try $0.decode(SpaceID.self, at: 0) })
        let yielded = withoutData.filter { idle.contains($0.value) }.keys.sorted()
        for (publicID, holder) in withoutData where !idle.contains(holder) { owners[publicID] = .some(nil) }
        if !yielded.isEmpty {
            try connection.execute("""
                UPDATE records SET public_id = NULL
                WHERE public_id = ANY(\(yielded)) AND visibility = \(literal: RecordState.PublicVisibility.private)
                """)
        }
        return owners
    }

    /// What each public id the job's fork ops name holds: a record of this space (the
    /// applier reads it as the job leaves it), or another space's readable record. Ops
    /// already rejected (beyond the pusher's budget) look nothing up.
    static func forkSources(_ connection: PGConnection, space: SpaceID, ops: [Op]) throws -> [String: ForkSource] {
        let ids = Array(Set(ops.filter { $0.type == .fork && $0.rejected == nil }.compactMap(\.publicID)))
        guard !ids.isEmpty else { return [:] }
        var sources: [String: ForkSource] = [:]
        for row in try connection.execute("""
            SELECT public_id, space_id, collection, record_id, data, can_fork, visibility FROM records
            WHERE public_id = ANY(\(ids)) AND (space_id = \(space)::uuid OR visibility <> \(literal: RecordState.PublicVisibility.private))
            """) {
            let (publicID, owner, collection, id, data, canFork, visibility) =
                try row.decode((String, SpaceID, String, String, String, Bool, String).self)
            let key = RecordKey(collection: collection, id: id)
            sources[publicID] = owner == space
                ? .own(key)
                : .other(
                    space: owner, key: key, data: try JSONParser.parse(data).objectValue ?? [:], canFork: canFork,
                    listed: visibility == RecordState.PublicVisibility.public.rawValue)
        }
        return sources
    }

    /// Raises each forked record's `fork_count`, once per forking user — kept as the
    /// SHA-256 of their id, which outlives their account — and never for a member of the
    /// source's space (forking your own record is no endorsement).
    static func countForks(_ connection: PGConnection, space: SpaceID, user: UserID, forked: Set<ForkedRecord>) throws {
        guard !forked.isEmpty else { return }
        let sources = forked.map { (space: $0.space ?? space, key: $0.key) }
            .sorted { ($0.space, $0.key) < ($1.space, $1.key) }
        try connection.execute("""
            WITH counted AS (
              INSERT INTO forks (source_space_id, source_collection, source_record_id, forker_hash)
              SELECT space_id, collection, record_id, encode(sha256(convert_to(\(user), 'UTF8')), 'hex')
              FROM unnest(\(sources.map(\.space))::uuid[], \(sources.map(\.key.collection)), \(sources.map(\.key.id)))
                AS u(space_id, collection, record_id)
              WHERE NOT EXISTS (SELECT 1 FROM space_members m WHERE m.space_id = u.space_id AND m.user_id = \(user))
              ON CONFLICT DO NOTHING
              RETURNING source_space_id, source_collection, source_record_id)
            UPDATE records r SET fork_count = r.fork_count + 1
            FROM counted f
            WHERE r.space_id = f.source_space_id AND r.collection = f.source_collection AND r.record_id = f.source_record_id
            """)
    }

    /// A record of a space.
    struct SpaceKey: Hashable {
        let space: SpaceID
        let key: RecordKey
    }

    /// What a set of jobs reads before they are applied.
    struct StateReads {
        var spaces = Set<SpaceID>()
        /// The services among the jobs' pushers (`ServicePrincipal.user`).
        var services = Set<UserID>()
        var opIDs: [(space: SpaceID, opID: String)] = []
        var keys = Set<SpaceKey>()
    }

    /// One space as the jobs applied so far have left it.
    struct SpaceState {
        var known = Set<String>()
        var records: [RecordKey: StoredRecord] = [:]
        var members: [UserID: SpaceRole] = [:]
        /// The files each record counts towards (`records.blob_refs`).
        var blobRefs: [RecordKey: Set<String>] = [:]
    }

    /// What a set of jobs writes: the records (with the author's name and user of the job
    /// that last changed each), the op_ids to remember, each space's counter, each job's results.
    struct StateWrites {
        /// A record written, with the author's name, user and id of the job that last changed it.
        typealias Record = (record: StoredRecord, author: String?, user: UserID, job: JobID)

        /// The version of the rules that judged the jobs (0: none).
        let rulesVersion: Int64
        var records: [SpaceKey: Record] = [:]
        /// The records of `records` that were read from the table (the others are new).
        var stored = Set<SpaceKey>()
        var opIDs: [(space: SpaceID, opID: String)] = []
        var counters: [SpaceID: Int64] = [:]
        /// The jobs applied, by their rows' space and id.
        var jobs: [(space: SpaceID, job: JobID, checkpoint: Int64, results: String)] = []
        /// Per space and file, how many more (or fewer) records reference it.
        var blobReferences: [SpaceBlob: Int] = [:]
        /// The files each written record counts towards, as stored (`blob_refs`).
        var blobRefs: [SpaceKey: Set<String>] = [:]
        /// Written records whose data holds an object or an array, so may reference a file
        /// (the others reference none: most writes cost no walk).
        var mayReference = Set<SpaceKey>()
        /// Per space, the spaces it forked from: their files become its files too.
        var forkedFrom: [SpaceID: Set<SpaceID>] = [:]

        /// Adds what one job of the set changed, remembered and counted.
        mutating func add(_ outcome: JobApplier.Outcome, of job: LockedJob) throws {
            for (key, record) in outcome.changed {
                let spaceKey = SpaceKey(space: job.space, key: key)
                records[spaceKey] = (record, job.author, job.user, job.id)
                if record.state.fields.values.contains(where: \.mayHoldBlobReference) { mayReference.insert(spaceKey) }
            }
            counters[job.space] = outcome.counter
            opIDs += outcome.remembered.map { (job.space, $0) }
            jobs.append((job.space, job.id, outcome.counter, try OpResult.encodeStored(outcome.results)))
            let sources = outcome.forked.compactMap(\.space).filter { $0 != job.space }
            if !sources.isEmpty { forkedFrom[job.space, default: []].formUnion(sources) }
        }
    }

    struct SpaceBlob: Hashable, Comparable {
        let space: SpaceID
        let sha256: String

        static func < (lhs: SpaceBlob, rhs: SpaceBlob) -> Bool { (lhs.space, lhs.sha256) < (rhs.space, rhs.sha256) }
    }

    /// Counts the references each written record gained or lost, against what it counted
    /// towards when read. A live record counts towards the files its data references (once
    /// each, however often it names them); a tombstone keeps counting towards those its
    /// data referenced when it was deleted, until purge removes it.
    static func countReferences(_ writes: inout StateWrites, before: [SpaceKey: Set<String>]) {
        let candidates = before.isEmpty ? writes.mayReference : writes.mayReference.union(before.keys)
        for key in candidates {
            guard let write = writes.records[key] else { continue }
            let then = before[key] ?? []
            let now = write.record.state.deleted ? then : write.record.state.fields.referencedBlobs
            if !now.isEmpty { writes.blobRefs[key] = now }
            guard now != then else { continue }
            for sha256 in now.subtracting(then) { writes.blobReferences[SpaceBlob(space: key.space, sha256: sha256), default: 0] += 1 }
            for sha256 in then.subtracting(now) { writes.blobReferences[SpaceBlob(space: key.space, sha256: sha256), default: 0] -= 1 }
        }
        if !writes.blobReferences.isEmpty { writes.blobReferences = writes.blobReferences.filter { $0.value != 0 } }
    }

    /// Writes the reference counts, in the record's transaction: a file whose count drops
    /// to zero starts its retention; a forked record's files are first given to the
    /// forker's space (the source's object, shared). Rows are locked in (space, hash)
    /// order, as the intake's claim locks them.
    static func saveReferences(_ connection: PGConnection, _ writes: StateWrites) throws {
        guard !writes.blobReferences.isEmpty else { return }
        for (space, sources) in writes.forkedFrom {
            let gained = writes.blobReferences.filter { $0.key.space == space && $0.value > 0 }.map(\.key.sha256)
            guard !gained.isEmpty else { continue }
            try connection.execute("""
                INSERT INTO blobs (space_id, sha256, object_id, store, size, content_type)
                SELECT DISTINCT ON (sha256) \(space)::uuid, sha256, object_id, store, size, content_type FROM (
                  SELECT sha256, object_id, store, size, content_type FROM blobs
                  WHERE space_id = ANY(\(sources.sorted())::uuid[]) AND sha256 = ANY(\(gained.sorted()))
                  ORDER BY space_id, sha256 FOR SHARE) s
                ON CONFLICT (space_id, sha256) DO NOTHING
                """)
        }
        let deltas = writes.blobReferences.sorted { $0.key < $1.key }
        try connection.execute("""
            WITH d AS (
              SELECT * FROM unnest(\(deltas.map(\.key.space))::uuid[], \(deltas.map(\.key.sha256)),
                                   \(deltas.map { Int32($0.value) })) AS d(space_id, sha256, delta)),
            locked AS (
              SELECT b.space_id, b.sha256, d.delta FROM blobs b JOIN d USING (space_id, sha256)
              ORDER BY b.space_id, b.sha256 FOR NO KEY UPDATE OF b)
            UPDATE blobs b SET ref_count = greatest(b.ref_count + l.delta, 0),
              unreferenced_since = CASE WHEN b.ref_count + l.delta > 0 THEN NULL
                                        ELSE coalesce(b.unreferenced_since, clock_timestamp()) END
            FROM locked l WHERE b.space_id = l.space_id AND b.sha256 = l.sha256
            """)
    }

    /// The spaces' members with their roles and the op_ids they have already seen (one
    /// statement, one row of aligned arrays), then the records with these keys (another).
    static func loadState(_ connection: PGConnection, _ reads: StateReads) throws -> [SpaceID: SpaceState] {
        var states: [SpaceID: SpaceState] = [:]
        if let row = try connection.execute("""
            SELECT m.spaces, m.users, m.roles, o.spaces, o.op_ids
            FROM (SELECT array_agg(space_id) AS spaces, array_agg(user_id) AS users, array_agg(role) AS roles
                  FROM (SELECT space_id, user_id, role FROM space_members WHERE space_id = ANY(\(Array(reads.spaces))::uuid[])
                        UNION ALL
                        -- A service writes where its token, not revoked nor read-only, reaches.
                        SELECT s.space_id, \(ServicePrincipal.userPrefix) || t.token_id, \(SpaceRole.service)
                        FROM service_tokens t CROSS JOIN unnest(\(Array(reads.spaces))::uuid[]) AS s(space_id)
                        WHERE \(ServicePrincipal.userPrefix) || t.token_id = ANY(\(Array(reads.services)))
                          AND t.revoked_at IS NULL AND NOT t.read_only
                          AND (t.spaces IS NULL OR s.space_id = ANY(t.spaces))) m) m,
                 (SELECT array_agg(o.space_id) AS spaces, array_agg(o.op_id) AS op_ids
                  FROM op_ids o JOIN unnest(\(reads.opIDs.map(\.space))::uuid[], \(reads.opIDs.map(\.opID))::uuid[]) AS k(space_id, op_id)
                    USING (space_id, op_id)) o
            """).first {
            let (memberSpaces, users, roles, knownSpaces, opIDs) =
                try row.decode(([SpaceID]?, [UserID]?, [String]?, [SpaceID]?, [String]?).self)
            for (index, space) in (memberSpaces ?? []).enumerated() {
                states[space, default: SpaceState()].members[users![index]] = SpaceRole(rawValue: roles![index])
            }
            for (index, space) in (knownSpaces ?? []).enumerated() {
                states[space, default: SpaceState()].known.insert(opIDs![index])
            }
        }
        let keys = Array(reads.keys)
        for row in try connection.execute("""
            SELECT \(sql: RecordRow.selection) FROM records r
            JOIN unnest(\(keys.map(\.space))::uuid[], \(keys.map(\.key.collection)), \(keys.map(\.key.id))) AS k(space_id, collection, record_id)
              USING (space_id, collection, record_id)
            """) {
            let record = try row.decode(as: RecordRow.self)
            states[record.space, default: SpaceState()].records[record.key] = try record.stored()
            if let blobs = record.blobRefs, !blobs.isEmpty { states[record.space, default: SpaceState()].blobRefs[record.key] = Set(blobs) }
        }
        return states
    }

    /// Every write of a set of jobs in one statement: the remembered op_ids, the changed
    /// records in key order — new ones inserted, stored ones updated — each space's
    /// counter, and each job: `succeeded`, with results and checkpoint. Returns each job's
    /// push→applied seconds.
    ///
    /// `visibility` is what readers see; a record that readers start to see, or under a new
    /// public id, is stamped `published_at` now, with `author`, the publishing token's name.
    /// No write needs `ON CONFLICT` (whose speculative insertion logs every row twice):
    /// under the counter lock nothing else inserts a space's records or op_ids. Should a
    /// record read as stored have gone meanwhile (purge takes a tombstone without that
    /// lock), fewer rows are updated than read, and the statement fails: the jobs are then
    /// applied again, one by one, reading afresh.
    static func save(_ connection: PGConnection, _ writes: StateWrites, attempt: Attempt) throws -> [JobID: Double] {
        let sorted = writes.records.sorted { ($0.key.space, $0.key.key) < ($1.key.space, $1.key.key) }
        let columns = WrittenColumn.all(sorted, writes)
        var source = PGUnnest()
        for column in columns { source.column(column.name, column.parameter) }
        let keys = columns.filter { $0.role == .key }.map(\.name)
        let copied = columns.filter { $0.role == .copied }
        let counters = writes.counters.sorted { $0.key < $1.key }
        let updates = sorted.filter { writes.stored.contains($0.key) }.count
        var latencies: [JobID: Double] = [:]
        for row in try connection.execute("""
            WITH remembered AS (
              INSERT INTO op_ids (space_id, op_id)
              SELECT * FROM unnest(\(writes.opIDs.map(\.space))::uuid[], \(writes.opIDs.map(\.opID))::uuid[])),
            source AS (
              SELECT u.*,
                     CASE WHEN public_id IS NULL THEN NULL ELSE author END AS shown_author,
                     CASE WHEN public_id IS NULL OR author IS NULL THEN NULL ELSE author_user END AS shown_author_user
              FROM \(source, as: "u")),
            inserted AS (
              INSERT INTO records (\(sql: (keys + copied.map(\.name) + WrittenColumn.computedOnInsert.map(\.name)).joined(separator: ", ")))
              SELECT \(sql: (keys.map { "s.\($0)" } + copied.map(\.stored) + WrittenColumn.computedOnInsert.map(\.value)).joined(separator: ", "))
              FROM source s WHERE NOT s.stored),
            updated AS (
              UPDATE records SET \(sql: copied.map { "\($0.name) = \($0.stored)" }.joined(separator: ", ")),
                \(sql: WrittenColumn.computedOnUpdate)
              FROM source s
              WHERE s.stored AND \(sql: keys.map { "records.\($0) = s.\($0)" }.joined(separator: " AND "))
              RETURNING 1),
            counter AS (
              UPDATE space_counters c SET counter = u.counter
              FROM unnest(\(counters.map(\.key))::uuid[], \(counters.map(\.value))) AS u(space_id, counter)
              WHERE c.space_id = u.space_id AND c.counter <> u.counter)
            UPDATE jobs SET status = \(JobStatus.succeeded), checkpoint = u.checkpoint, results = u.results,
              rules_version = \(writes.rulesVersion), finished_at = clock_timestamp(), last_error = NULL, \(sql: attempt.logged)
            FROM unnest(\(writes.jobs.map(\.space))::uuid[], \(writes.jobs.map(\.job))::uuid[],
                        \(writes.jobs.map(\.checkpoint)), \(writes.jobs.map { PGJSON($0.results) }))
              AS u(space_id, job_id, checkpoint, results)
            WHERE jobs.space_id = u.space_id AND jobs.job_id = u.job_id
            RETURNING jobs.job_id, extract(epoch FROM jobs.finished_at - jobs.created_at)::float8,
                      (SELECT count(*) FROM updated)
            """) {
            let (id, latency, updated) = try row.decode((JobID, Double, Int).self)
            guard updated == updates else { throw ApplyError.recordsGoneAtWrite(count: updates - updated) }
            latencies[id] = latency
        }
        try saveReferences(connection, writes)
        return latencies
    }
}
