import Foundation
import PQBridge
import SyncModels

/// The statements of applying jobs: the locks, the one read and the one write of a set of
/// jobs, and what publish and fork ops read and count beyond their records.
extension ApplyStore {
    /// Locks the job rows (in id order), then — for the jobs not finished — their spaces'
    /// counter rows (in space order), created on first use (G4); one statement. Every
    /// lock is held until commit. A space deleted since intake gets no counter (a deletion
    /// committing meanwhile makes the insert fail on the foreign key: the batch is then
    /// applied job by job, and each finds the space gone); its jobs find no members.
    static func lock(_ connection: PGConnection, jobIDs: [String]) throws
        -> (jobs: [LockedJob], counters: [String: Int64], purgeClocks: [String: Stamp])
    {
        let rows = try connection.query("""
            WITH job AS (
              SELECT job_id, user_id, space_id, device_id, status, ops, author_name FROM jobs
              WHERE job_id = ANY($1::uuid[]) ORDER BY job_id FOR UPDATE),
            counter AS (
              INSERT INTO space_counters (space_id)
              SELECT DISTINCT space_id FROM job JOIN spaces USING (space_id)
              WHERE status IN ('queued', 'processing', 'retrying') ORDER BY space_id
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

    /// Raises each forked record's `fork_count`, once per forking user — kept as the
    /// SHA-256 of their id, which outlives their account — and never for a member of the
    /// source's space (forking your own record is no endorsement).
    static func countForks(_ connection: PGConnection, space: String, user: String, forked: Set<ForkedRecord>) throws {
        guard !forked.isEmpty else { return }
        let sources = forked.map { (space: $0.space ?? space, key: $0.key) }
            .sorted { ($0.space, $0.key) < ($1.space, $1.key) }
        try connection.query("""
            WITH counted AS (
              INSERT INTO forks (source_space_id, source_collection, source_record_id, forker_hash)
              SELECT s, c, i, encode(sha256(convert_to($1, 'UTF8')), 'hex')
              FROM unnest($2::uuid[], $3::text[], $4::text[]) AS u(s, c, i)
              WHERE NOT EXISTS (SELECT 1 FROM space_members m WHERE m.space_id = u.s AND m.user_id = $1)
              ON CONFLICT DO NOTHING
              RETURNING source_space_id, source_collection, source_record_id)
            UPDATE records r SET fork_count = r.fork_count + 1
            FROM counted f
            WHERE r.space_id = f.source_space_id AND r.collection = f.source_collection AND r.record_id = f.source_record_id
            """, [user, sources.map(\.space), sources.map(\.key.collection), sources.map(\.key.id)])
    }

    /// A record of a space.
    struct SpaceKey: Hashable {
        let space: String
        let key: RecordKey
    }

    /// What a set of jobs reads before they are applied.
    struct StateReads {
        var spaces = Set<String>()
        var opIDs: [(space: String, opID: String)] = []
        var keys = Set<SpaceKey>()
    }

    /// One space as the jobs applied so far have left it.
    struct SpaceState {
        var known = Set<String>()
        var records: [RecordKey: StoredRecord] = [:]
        var members: [String: SpaceRole] = [:]
    }

    /// What a set of jobs writes: the records (with the author's name and user of the job
    /// that last changed each), the op_ids to remember, each space's counter, each job's results.
    struct StateWrites {
        var records: [SpaceKey: (record: StoredRecord, author: String?, user: String)] = [:]
        var opIDs: [(space: String, opID: String, jobID: String)] = []
        var counters: [String: Int64] = [:]
        var jobs: [(id: String, checkpoint: Int64, results: String)] = []
    }

    /// In one statement: the op_ids already remembered, the records with these keys, and
    /// the members of these spaces with their roles (rows of kind `o`, `r` and `m`).
    static func loadState(_ connection: PGConnection, _ reads: StateReads) throws -> [String: SpaceState] {
        let keys = Array(reads.keys)
        let rows = try connection.query("""
            SELECT 'o' AS kind, o.space_id::text AS space_id, o.op_id::text AS collection, NULL AS record_id,
                   NULL::bigint AS version, NULL AS data, NULL AS field_clocks, NULL AS floor_clock, NULL AS write_clock,
                   NULL AS delete_clock, NULL::uuid AS updated_by, NULL AS public_id, NULL::boolean AS can_fork,
                   NULL AS visibility_clock, NULL::boolean AS listed, NULL AS forked_from, NULL AS fork_clock,
                   NULL AS published_at
            FROM op_ids o JOIN unnest($1::uuid[], $2::uuid[]) AS k(s, o) ON o.space_id = k.s AND o.op_id = k.o
            UNION ALL
            SELECT 'm', space_id::text, user_id, role, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                   NULL, NULL
            FROM space_members WHERE space_id = ANY($3::uuid[])
            UNION ALL
            SELECT 'r', r.space_id::text, r.collection, r.record_id, r.version, r.data::text, r.field_clocks::text,
                   r.floor_clock, r.write_clock, r.delete_clock, r.updated_by, r.public_id, r.can_fork, r.visibility_clock,
                   r.listed, r.forked_from, r.fork_clock, syncline_rfc3339(r.published_at)
            FROM records r
            JOIN unnest($4::uuid[], $5::text[], $6::text[]) AS k(s, collection, record_id)
              ON r.space_id = k.s AND r.collection = k.collection AND r.record_id = k.record_id
            """, [
                reads.opIDs.map(\.space), reads.opIDs.map(\.opID), Array(reads.spaces),
                keys.map(\.space), keys.map(\.key.collection), keys.map(\.key.id),
            ]).rows
        var states: [String: SpaceState] = [:]
        for row in rows {
            let space = try row.string("space_id")
            switch row["kind"] {
            case "o":
                states[space, default: SpaceState()].known.insert(try row.string("collection"))
            case "m":
                states[space, default: SpaceState()].members[try row.string("collection")] =
                    SpaceRole(rawValue: try row.string("record_id"))
            default:
                let record = try storedRecord(row)
                states[space, default: SpaceState()].records[record.key] = record
            }
        }
        return states
    }

    /// A record as `loadState` reads it.
    static func storedRecord(_ row: PGRow) throws -> StoredRecord {
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
        return StoredRecord(
            key: key, version: try row.int("version"), state: state, updatedBy: row["updated_by"],
            publishedAt: row["published_at"])
    }

    /// Every write of a set of jobs in one statement: the remembered op_ids, the changed
    /// records in key order (`visibility` is what readers see; a record that readers start
    /// to see, or under a new public id, is stamped `published_at` now, with `author`, the
    /// publishing token's name), each space's counter, and each job — `succeeded`, with
    /// results and checkpoint. Returns each job's push→applied seconds.
    static func save(_ connection: PGConnection, _ writes: StateWrites, attemptBegun: Bool) throws -> [String: Double] {
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
        let records = writes.records.sorted { ($0.key.space, $0.key.key) < ($1.key.space, $1.key.key) }
        func column<Value: PGArrayElement>(_ value: (StoredRecord) -> Value) -> [Value] { records.map { value($0.value.record) } }
        let counters = writes.counters.sorted { $0.key < $1.key }
        let rows = try connection.query("""
            WITH remembered AS (
              INSERT INTO op_ids (space_id, op_id, job_id)
              SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::uuid[]) ON CONFLICT DO NOTHING),
            saved AS (
              INSERT INTO records (space_id, collection, record_id, version, deleted, data, field_clocks,
                                   floor_clock, write_clock, delete_clock, updated_by, updated_at,
                                   visibility, public_id, can_fork, visibility_clock, published_at, author,
                                   listed, forked_from, fork_clock, author_user)
              SELECT s, c, i, v, d, data::jsonb, clocks::jsonb, f, w, x, b, clock_timestamp(),
                     vis, p, k, vc, CASE WHEN vis = 'private' THEN NULL ELSE clock_timestamp() END,
                     CASE WHEN p IS NULL THEN NULL ELSE a END, l, ff, fc,
                     CASE WHEN p IS NULL OR a IS NULL THEN NULL ELSE au END
              FROM unnest($4::uuid[], $5::text[], $6::text[], $7::bigint[], $8::boolean[], $9::text[], $10::text[],
                          $11::text[], $12::text[], $13::text[], $14::uuid[], $15::text[], $16::boolean[], $17::text[],
                          $18::text[], $19::text[], $20::boolean[], $21::text[], $22::text[], $28::text[])
                   AS u(s, c, i, v, d, data, clocks, f, w, x, b, p, k, vc, a, vis, l, ff, fc, au)
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
                author_user = CASE WHEN (records.public_id IS DISTINCT FROM EXCLUDED.public_id AND EXCLUDED.author IS NOT NULL)
                                        OR (records.public_id IS NOT DISTINCT FROM EXCLUDED.public_id AND records.author IS NULL)
                                   THEN EXCLUDED.author_user ELSE records.author_user END,
                public_id = EXCLUDED.public_id),
            counter AS (
              UPDATE space_counters c SET counter = u.n FROM unnest($23::uuid[], $24::bigint[]) AS u(s, n)
              WHERE c.space_id = u.s AND c.counter <> u.n)
            UPDATE jobs SET status = 'succeeded', checkpoint = u.cp, results = u.res::jsonb,
              finished_at = clock_timestamp(), last_error = NULL, \(attempt)
            FROM unnest($25::uuid[], $26::bigint[], $27::text[]) AS u(jid, cp, res)
            WHERE jobs.job_id = u.jid
            RETURNING jobs.job_id::text AS job_id, extract(epoch FROM jobs.finished_at - jobs.created_at)::float8 AS latency
            """, [
                writes.opIDs.map(\.space), writes.opIDs.map(\.opID), writes.opIDs.map(\.jobID),
                records.map(\.key.space), records.map(\.key.key.collection), records.map(\.key.key.id),
                column { $0.version }, column { $0.state.deleted },
                column { JSONWriter.string(.object($0.state.fields)) },
                column { JSONWriter.string(.object($0.state.fieldClocks.mapValues { .string($0.description) })) },
                column { $0.state.floor?.description }, column { $0.state.writeClock?.description },
                column { $0.state.deleteClock?.description }, column { $0.updatedBy },
                column { $0.state.visibility?.publicID }, column { $0.state.visibility?.canFork == true },
                column { $0.state.visibility?.clock.description }, records.map(\.value.author),
                column { $0.state.publicVisibility.rawValue }, column { $0.state.visibility?.listed != false },
                column { $0.state.fork?.publicID }, column { $0.state.fork?.clock.description },
                counters.map(\.key), counters.map(\.value),
                writes.jobs.map(\.id), writes.jobs.map(\.checkpoint), writes.jobs.map(\.results),
                records.map(\.value.user),
            ]).rows
        var latencies: [String: Double] = [:]
        for row in rows { latencies[try row.string("job_id")] = row["latency"].flatMap(Double.init) ?? 0 }
        return latencies
    }
}
