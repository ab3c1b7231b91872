import PQBridge
import SyncModels

/// What the support console reads: a user's spaces and devices, a device's pulls, streams,
/// jobs and set-aside ops, a space's members and collections, its records with their field
/// clocks, a record's history, a job found by its id or trace id, and the facts behind "why
/// doesn't this device have that record". Every read is one indexed lookup or a bounded
/// index range (see docs/BENCHMARKS.md, "The support console"). Views are JSON the
/// database assembles; record data appears only in `records` and `record`.
public struct SupportStore: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    /// How recently a fanout replica must have written its streams for them to count as open
    /// (replicas write at least every 30 s; a crashed one's list goes stale).
    static let liveStreams = "interval '90 seconds'"

    /// How many records per collection a space's summary counts before it says "at least".
    public static let countCap = 10_000

    /// For the two reads whose plan PostgreSQL cannot estimate well: the space summary,
    /// which counts each collection in the primary key's order up to `countCap` (a space
    /// holding most of the table would otherwise be read whole and sorted), and a record's
    /// history, whose GIN lookup PostgreSQL prices at 0.5 % of all jobs (record keys are
    /// too many and too rare for its statistics) and would trade for a scan of them all.
    public static let indexedOnly = "SET LOCAL enable_seqscan = off"

    /// A device as listed (alias `d`): its pulls per space, open streams, last push, reports.
    static let deviceSummary = """
        jsonb_build_object(
          'device_id', d.device_id, 'user_id', d.user_id, 'name', d.name, 'platform', d.platform,
          'created_at', syncline_rfc3339(d.created_at), 'last_seen_at', syncline_rfc3339(d.last_seen_at),
          'revoked_at', syncline_rfc3339(d.revoked_at), 'webhook', d.push_url IS NOT NULL,
          'last_push_at', (SELECT syncline_rfc3339(max(j.created_at)) FROM jobs j WHERE j.device_id = d.device_id),
          'last_pull_at', (SELECT syncline_rfc3339(max(c.pulled_at)) FROM device_cursors c WHERE c.device_id = d.device_id),
          'pulls', coalesce((
            SELECT jsonb_agg(jsonb_build_object(
              'space_id', c.space_id, 'cursor', c.cursor::text, 'collections', c.collections,
              'pulled_at', syncline_rfc3339(c.pulled_at)) ORDER BY c.pulled_at DESC)
            FROM device_cursors c WHERE c.device_id = d.device_id), '[]'),
          'streams', coalesce((
            SELECT jsonb_agg(s.stream || jsonb_build_object('replica', q.queue) ORDER BY s.stream ->> 'opened_at')
            FROM fanout_queues q CROSS JOIN LATERAL jsonb_array_elements(q.streams) AS s(stream)
            WHERE q.seen_at > now() - \(liveStreams) AND s.stream ->> 'device_id' = d.device_id::text), '[]'),
          'set_aside', (SELECT count(*) FROM set_aside_reports a WHERE a.device_id = d.device_id))
        """

    /// A user's spaces and devices; nil when the server knows neither.
    public func user(_ user: UserID) async throws -> JSONValue? {
        let view = try await json(Self.userQuery(user))
        guard let view, view.objectValue?["spaces"]?.arrayValue?.isEmpty == false
            || view.objectValue?["devices"]?.arrayValue?.isEmpty == false
        else { return nil }
        return view
    }

    /// A device: its summary, its newest jobs with their outcomes, and the ops it reported set aside.
    public func device(_ id: DeviceID) async throws -> (user: UserID, view: JSONValue)? {
        guard let view = try await json(Self.deviceQuery(id)), let user = view.objectValue?["user_id"]?.stringValue
        else { return nil }
        return (UserID(user), view)
    }

    /// A space: members, its counter and purge horizon, and its collections with how many
    /// records each holds (tombstones not yet purged included; counted up to `countCap`).
    public func space(_ id: SpaceID) async throws -> (owners: [String], view: JSONValue)? {
        guard let text = try await readIndexedOnly(Self.spaceQuery(id)).first?.decode(PGJSON?.self, at: 0)?.text,
              let view = try? JSONParser.parse(text)
        else { return nil }
        let owners = view.objectValue?["members"]?.arrayValue?.compactMap { member -> String? in
            member.objectValue?["role"]?.stringValue == "owner" ? member.objectValue?["user_id"]?.stringValue : nil
        } ?? []
        return (owners, view)
    }

    /// A space's owners (whose data its records are, for the audit log); nil when there is no such space.
    public func owners(of space: SpaceID) async throws -> [String]? {
        let rows = try await pool.execute("""
            SELECT m.user_id FROM spaces s LEFT JOIN space_members m ON m.space_id = s.space_id AND m.role = 'owner'
            WHERE s.space_id = \(space) ORDER BY m.joined_at
            """)
        guard !rows.isEmpty else { return nil }
        return try rows.compactMap { try $0.decode(String?.self, at: 0) }
    }

    /// The details a record browser shows beside a data query's page: each record's field
    /// clocks (when and by which device and op each field was last written), its author and
    /// the clocks of its whole writes, by record id.
    public func clocks(space: SpaceID, collection: String, ids: [String]) async throws -> [String: JSONValue] {
        guard !ids.isEmpty else { return [:] }
        let rows = try await pool.execute(Self.clocksQuery(space: space, collection: collection, ids: ids))
        var details: [String: JSONValue] = [:]
        for row in rows {
            let clocks = try JSONParser.parse(try row.decode(PGJSON.self, at: 1).text).objectValue ?? [:]
            details[try row.decode(String.self, at: 0)] = .object([
                "field_clocks": .object(clocks.mapValues { Self.stamp($0.stringValue) }),
                "created_by": Self.text(try row.decode(String?.self, at: 2)),
                "write_clock": Self.stamp(try row.decode(String?.self, at: 3)),
                "delete_clock": Self.stamp(try row.decode(String?.self, at: 4)),
                "merges": .bool(try row.decode(Bool.self, at: 5)),
            ])
        }
        return details
    }

    /// A stored stamp as the console shows it: the clock (its node is the writing device)
    /// and the op.
    static func stamp(_ stored: String?) -> JSONValue {
        guard let stored, let stamp = StoredStamp.stamp(stored) else { return .null }
        var fields: [String: JSONValue] = ["hlc": .string(stamp.hlc), "op_id": .string(stamp.opID)]
        if let hlc = HLC(stamp.hlc) { fields["device_id"] = .string(hlc.node) }
        return .object(fields)
    }

    static func text(_ value: String?) -> JSONValue { value.map(JSONValue.string) ?? .null }

    /// `query` with `indexedOnly` set for it alone.
    private func readIndexedOnly(_ query: PGQuery) async throws -> PGRows {
        try await pool.transaction { connection in
            try connection.execute(PGQuery(stringLiteral: Self.indexedOnly))
            return try connection.execute(query)
        }
    }

    /// A job's stored ops (column `opsColumn`) each with its result (the next column),
    /// nil while the job is not applied.
    static func opsWithResults(_ row: PGRows.Row, opsColumn: Int) throws -> [(op: Op, result: OpResult?)] {
        let ops = Op.decodeStored(try row.decode(PGJSON.self, at: opsColumn).text) ?? []
        let results = try row.decode(PGJSON?.self, at: opsColumn + 1).map { try OpResult.decodeStored($0.text, opIDs: ops.map(\.opID)) } ?? []
        let byOp = Dictionary(results.map { ($0.opID, $0) }, uniquingKeysWith: { first, _ in first })
        return ops.map { ($0, byOp[$0.opID]) }
    }

    /// The newest jobs (at most `limit`) that named a record, newest first, each with the
    /// ops that named it and their results.
    public func history(space: SpaceID, collection: String, id: String, limit: Int = 50) async throws -> [HistoryJob] {
        var jobs: [HistoryJob] = []
        for row in try await readIndexedOnly(Self.historyQuery(space: space, collection: collection, id: id, limit: limit)) {
            jobs.append(HistoryJob(
                jobID: try row.decode(String.self, at: 0), userID: try row.decode(String.self, at: 1),
                deviceID: try row.decode(String.self, at: 2), status: try row.decode(String.self, at: 3),
                attempts: try row.decode(Int.self, at: 4), traceID: try row.decode(String?.self, at: 5),
                lastError: try row.decode(String?.self, at: 6), createdAt: try row.decode(String.self, at: 7),
                finishedAt: try row.decode(String?.self, at: 8),
                ops: try Self.opsWithResults(row, opsColumn: 9).filter { $0.op.collection == collection && $0.op.id == id }))
        }
        return jobs
    }

    /// When the oldest job the space still keeps was pushed: a record's history reaches no
    /// further back.
    public func oldestJobKept(space: SpaceID) async throws -> String? {
        try await pool.execute("""
            SELECT syncline_rfc3339(created_at) FROM jobs WHERE space_id = \(space) ORDER BY job_id LIMIT 1
            """).first.map { try $0.decode(String.self, at: 0) }
    }

    /// One job that named a record, with those ops and their results.
    public struct HistoryJob: Sendable {
        public let jobID: String, userID: String, deviceID: String, status: String, attempts: Int
        public let traceID: String?, lastError: String?, createdAt: String, finishedAt: String?
        public let ops: [(op: Op, result: OpResult?)]
    }

    /// A record's row as the console shows it (data included: for admins with the support
    /// scope), nil when the space holds none.
    public func record(space: SpaceID, collection: String, id: String) async throws -> JSONValue? {
        guard let row = try await pool.execute("""
            SELECT \(sql: BackendRecordStore.columns) FROM records r
            WHERE r.space_id = \(space) AND r.collection = \(collection) AND r.record_id = \(id) AND \(sql: BackendRecordStore.holdsData)
            """).first
        else { return nil }
        return try Self.detail(try BackendRecordStore.record(row), clocks: try await clocks(space: space, collection: collection, ids: [id])[id])
    }

    /// A record as the console shows it: what the data API says of it, with its `clocks`.
    public static func detail(_ record: BackendRecord, clocks: JSONValue?) throws -> JSONValue {
        var view = try JSONParser.parse(String(decoding: try JSONCoding.encode(record), as: UTF8.self)).objectValue ?? [:]
        for (key, value) in clocks?.objectValue ?? [:] { view[key] = value }
        return .object(view)
    }

    /// A job named by its id or its trace id (or the push's whole `traceparent`), with its device and its ops' results (no op
    /// data: what a support engineer follows, not what a user wrote).
    public func job(_ key: String) async throws -> JSONValue? {
        let parts = key.lowercased().split(separator: "-")
        let traceID = parts.count == 4 ? String(parts[1]) : key.lowercased()
        let rows = if let id = JobID(key) {
            try await pool.execute(
                "SELECT \(sql: Self.jobColumns) FROM jobs j LEFT JOIN devices d ON d.device_id = j.device_id WHERE j.job_id = \(id)")
        } else {
            try await pool.execute(Self.jobByTraceQuery(traceID))
        }
        guard let row = rows.first else { return nil }
        let ops = try Self.opsWithResults(row, opsColumn: 14)
        return .object([
            "job_id": .string(try row.decode(String.self, at: 0)), "space_id": .string(try row.decode(String.self, at: 1)),
            "user_id": .string(try row.decode(String.self, at: 2)), "device_id": .string(try row.decode(String.self, at: 3)),
            "device_name": Self.text(try row.decode(String?.self, at: 4)), "status": .string(try row.decode(String.self, at: 5)),
            "attempts": .int(Int64(try row.decode(Int.self, at: 6))),
            "attempt_log": try JSONParser.parse(try row.decode(PGJSON.self, at: 7).text),
            "last_error": Self.text(try row.decode(String?.self, at: 8)), "trace_id": Self.text(try row.decode(String?.self, at: 9)),
            "checkpoint": Self.text(try row.decode(String?.self, at: 10)),
            "rules_version": try row.decode(Int64?.self, at: 11).map(JSONValue.int) ?? .null,
            "created_at": .string(try row.decode(String.self, at: 12)), "finished_at": Self.text(try row.decode(String?.self, at: 13)),
            "ops": .array(ops.map { Self.opView($0.op, result: $0.result, withData: false) }),
        ])
    }

    /// An op as the console lists it, with its result; its data only when asked.
    public static func opView(_ op: Op, result: OpResult?, withData: Bool) -> JSONValue {
        var fields: [String: JSONValue] = [
            "op_id": .string(op.opID), "type": .string(op.type.rawValue), "collection": .string(op.collection),
            "id": .string(op.id), "hlc": text(op.hlc), "field": text(op.field),
        ]
        if withData {
            fields["data"] = op.data.map(JSONValue.object) ?? .null
            if let by = op.by { fields["by"] = by }
            if let values = op.values { fields["values"] = .array(values) }
        }
        fields["result"] = result.map { result in
            .object([
                "status": .string(result.status.rawValue), "version": result.version.map(JSONValue.int) ?? .null,
                "reason": text(result.reason), "rule": text(result.rule),
            ])
        } ?? .null
        return .object(fields)
    }

    /// The facts behind "why doesn't device D have record R"; nil when there is no such device.
    public func facts(device: DeviceID, space: SpaceID, collection: String, id: String) async throws -> (user: UserID, facts: MissingRecordFacts)? {
        let rows = try await pool.execute(Self.factsQuery(device: device, space: space, collection: collection, id: id))
        guard let row = rows.first else { return nil }
        let newest = try await history(space: space, collection: collection, id: id, limit: 1).first.flatMap { job in
            job.ops.last.map { op, result in
                MissingRecordFacts.Job(
                    jobID: job.jobID, status: job.status, opType: op.type.rawValue, result: result?.status.rawValue,
                    reason: result?.reason, rule: result?.rule)
            }
        }
        let version = try row.decode(Int64?.self, at: 3)
        let cursor = try row.decode(Int64?.self, at: 6)
        let facts = MissingRecordFacts(
            collection: collection, deviceRevoked: try row.decode(Bool.self, at: 1), isMember: try row.decode(Bool.self, at: 2),
            record: try version.map { MissingRecordFacts.Record(version: $0, deleted: try row.decode(Bool.self, at: 4)) },
            purgeHorizon: try row.decode(Int64.self, at: 5), newestJob: newest,
            cursor: try cursor.map {
                MissingRecordFacts.Cursor(
                    cursor: $0, collections: try row.decode([String]?.self, at: 7), pulledAt: try row.decode(String.self, at: 8))
            },
            openStreams: try row.decode(Int.self, at: 9))
        return (UserID(try row.decode(String.self, at: 0)), facts)
    }

    // MARK: - The statements (public, so that a test can check each one's plan)

    public static func userQuery(_ user: UserID) -> PGQuery {
        """
        SELECT jsonb_build_object(
          'user_id', \(user)::text,
          'spaces', coalesce((
            SELECT jsonb_agg(jsonb_build_object(
              'space_id', s.space_id, 'name', s.name, 'role', m.role, 'personal', s.personal_of IS NOT NULL,
              'joined_at', syncline_rfc3339(m.joined_at)) ORDER BY m.joined_at)
            FROM space_members m JOIN spaces s USING (space_id) WHERE m.user_id = \(user)), '[]'),
          'devices', coalesce((
            SELECT jsonb_agg(\(sql: Self.deviceSummary) ORDER BY d.created_at)
            FROM devices d WHERE d.user_id = \(user)), '[]'))
        """
    }

    public static func deviceQuery(_ id: DeviceID) -> PGQuery {
        """
        SELECT \(sql: Self.deviceSummary) || jsonb_build_object(
          'jobs', coalesce((
            SELECT jsonb_agg(jsonb_build_object(
              'job_id', j.job_id, 'space_id', j.space_id, 'status', j.status, 'ops', j.op_count, 'attempts', j.attempts,
              'trace_id', j.trace_id, 'last_error', j.last_error, 'checkpoint', j.checkpoint::text,
              'created_at', syncline_rfc3339(j.created_at), 'finished_at', syncline_rfc3339(j.finished_at),
              'outcomes', (SELECT jsonb_object_agg(o.status, o.n) FROM (
                SELECT r ->> 'status' AS status, count(*) AS n FROM jsonb_array_elements(j.results) r GROUP BY 1) o))
              ORDER BY j.created_at DESC)
            FROM (SELECT * FROM jobs WHERE device_id = d.device_id ORDER BY created_at DESC LIMIT 50) j), '[]'),
          'set_aside_ops', coalesce((
            SELECT jsonb_agg(jsonb_build_object(
              'op_id', a.op_id, 'space_id', a.space_id, 'collection', a.collection, 'id', a.record_id, 'job_id', a.job_id,
              'reason', a.reason, 'reported_at', syncline_rfc3339(a.reported_at)) ORDER BY a.reported_at DESC)
            FROM (SELECT * FROM set_aside_reports WHERE device_id = d.device_id ORDER BY reported_at DESC LIMIT 100) a), '[]'))
        FROM devices d WHERE d.device_id = \(id)
        """
    }

    public static func spaceQuery(_ id: SpaceID) -> PGQuery {
        """
        WITH RECURSIVE names(collection) AS (
          (SELECT collection FROM records WHERE space_id = \(id) ORDER BY collection LIMIT 1)
          UNION ALL
          SELECT (SELECT r.collection FROM records r WHERE r.space_id = \(id) AND r.collection > n.collection
                  ORDER BY r.collection LIMIT 1)
          FROM names n WHERE n.collection IS NOT NULL)
        SELECT jsonb_build_object(
          'space_id', s.space_id, 'name', s.name, 'personal_of', s.personal_of, 'created_at', syncline_rfc3339(s.created_at),
          'counter', coalesce(c.counter, 0)::text, 'purge_horizon', coalesce(c.purge_horizon, 0)::text,
          'members', coalesce((
            SELECT jsonb_agg(jsonb_build_object('user_id', m.user_id, 'role', m.role, 'joined_at', syncline_rfc3339(m.joined_at))
              ORDER BY m.joined_at)
            FROM space_members m WHERE m.space_id = s.space_id), '[]'),
          'count_cap', \(Int32(Self.countCap)),
          'collections', coalesce((
            SELECT jsonb_agg(jsonb_build_object('collection', n.collection, 'records', (
              SELECT count(*) FROM (
                SELECT 1 FROM records r WHERE r.space_id = s.space_id AND r.collection = n.collection
                ORDER BY r.record_id LIMIT \(Int32(Self.countCap))) x)) ORDER BY n.collection)
            FROM names n WHERE n.collection IS NOT NULL), '[]'))
        FROM spaces s LEFT JOIN space_counters c ON c.space_id = s.space_id
        WHERE s.space_id = \(id)
        """
    }

    public static func clocksQuery(space: SpaceID, collection: String, ids: [String]) -> PGQuery {
        """
        SELECT record_id, field_clocks, created_by, write_clock, delete_clock, merge_state IS NOT NULL
        FROM records WHERE space_id = \(space) AND collection = \(collection) AND record_id = ANY(\(ids))
        """
    }

    public static func historyQuery(space: SpaceID, collection: String, id: String, limit: Int) -> PGQuery {
        """
        SELECT j.job_id, j.user_id, j.device_id, j.status, j.attempts, j.trace_id, j.last_error,
               syncline_rfc3339(j.created_at), syncline_rfc3339(j.finished_at), j.ops, j.results
        FROM job_records n JOIN jobs j ON j.space_id = n.space_id AND j.job_id = n.job_id
        WHERE n.records @> ARRAY[\(JobStore.RecordKey.of(space: space, collection: collection, id: id))]
        ORDER BY j.created_at DESC LIMIT \(Int32(limit))
        """
    }

    public static func factsQuery(device: DeviceID, space: SpaceID, collection: String, id: String) -> PGQuery {
        """
        SELECT d.user_id, d.revoked_at IS NOT NULL,
               EXISTS (SELECT 1 FROM space_members m WHERE m.space_id = \(space) AND m.user_id = d.user_id),
               r.version, r.deleted, coalesce(c.purge_horizon, 0),
               p.cursor, p.collections, syncline_rfc3339(p.pulled_at),
               (SELECT count(*) FROM fanout_queues q CROSS JOIN LATERAL jsonb_array_elements(q.streams) AS s(stream)
                WHERE q.seen_at > now() - \(sql: Self.liveStreams) AND s.stream ->> 'device_id' = d.device_id::text
                  AND coalesce(s.stream ->> 'space_id', \(space)::text) = \(space)::text)
        FROM devices d
        LEFT JOIN records r ON r.space_id = \(space) AND r.collection = \(collection) AND r.record_id = \(id)
          AND \(sql: BackendRecordStore.holdsData)
        LEFT JOIN space_counters c ON c.space_id = \(space)
        LEFT JOIN device_cursors p ON p.device_id = d.device_id AND p.space_id = \(space)
        WHERE d.device_id = \(device)
        """
    }

    public static func jobByTraceQuery(_ traceID: String) -> PGQuery {
        """
        SELECT \(sql: jobColumns) FROM jobs j LEFT JOIN devices d ON d.device_id = j.device_id
        WHERE split_part(j.trace_id, '-', 2) = \(traceID) AND j.trace_id IS NOT NULL
        ORDER BY j.created_at DESC LIMIT 1
        """
    }

    static let jobColumns = """
        j.job_id, j.space_id, j.user_id, j.device_id, d.name, j.status, j.attempts, j.attempt_log, j.last_error,
        j.trace_id, j.checkpoint::text, j.rules_version, syncline_rfc3339(j.created_at), syncline_rfc3339(j.finished_at),
        j.ops, j.results
        """

    private func json(_ query: PGQuery) async throws -> JSONValue? {
        guard let row = try await pool.execute(query).first, let text = try row.decode(PGJSON?.self, at: 0)?.text else { return nil }
        return try JSONParser.parse(text)
    }
}
