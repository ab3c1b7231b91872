import Foundation
import PQBridge
import SyncModels

/// Retention (honest retention): deletes what is past its keeping time in small batches, each
/// its own short transaction that skips rows another transaction holds, so purge never
/// holds long locks or blocks the sync path. Only one purge runs at a time: it holds a
/// session advisory lock on its connection for the whole run.
public struct PurgeStore: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    static let lockKey: Int64 = 0x5359_4E43_5055  // "SYNCPU"

    public struct Retention: Sendable {
        public var tombstones: Double
        public var jobs: Double
        public var deadLetters: Double
        public var devices: Double
        /// How long a record without data keeps its public id.
        public var publicIDReservation: Double
        /// How long a file no record of its space references is kept.
        public var blobs: Double

        public init(tombstones: Double, jobs: Double, deadLetters: Double, devices: Double, publicIDReservation: Double, blobs: Double) {
            self.blobs = blobs
            self.tombstones = tombstones
            self.jobs = jobs
            self.deadLetters = deadLetters
            self.devices = devices
            self.publicIDReservation = publicIDReservation
        }
    }

    /// What one run deleted.
    public struct Report: Sendable, Equatable, CustomStringConvertible {
        public var tombstones = 0
        public var jobs = 0
        public var opIDs = 0
        public var deadLetters = 0
        public var devices = 0
        public var releasedPublicIDs = 0
        /// Files no record referenced for the retention (their bytes are the sweeper's).
        public var blobs = 0
        /// Rows of spaces that no longer exist.
        public var orphans = 0
        /// Records whose counters' and sets' ops past the jobs' retention were settled.
        public var settledRecords = 0

        public var description: String {
            "tombstones=\(tombstones) jobs=\(jobs) op_ids=\(opIDs) dead_letters=\(deadLetters) devices=\(devices) "
                + "released_public_ids=\(releasedPublicIDs) blobs=\(blobs) orphans=\(orphans) settled_records=\(settledRecords)"
        }
    }

    /// Runs one purge, or returns nil at once when another purge holds the lock.
    public func run(_ retention: Retention, batch: Int = 1000) async throws -> Report? {
        try await pool.withConnection { connection in
            guard try connection.execute("SELECT pg_try_advisory_lock(\(Self.lockKey))").first?.decode(Bool.self, at: 0) == true else {
                return nil
            }
            defer { _ = try? connection.execute("SELECT pg_advisory_unlock(\(Self.lockKey))") }
            let drain = Drain(connection: connection, batch: batch)
            var report = Report()
            report.tombstones = try drain { Self.tombstones(retention, batch: $0) }
            report.deadLetters = try drain { Self.deadLetters(retention, batch: $0) }
            report.jobs = try drain { Self.finishedJobs(retention, batch: $0) }
            report.opIDs = try drain { Self.opIDs(retention, batch: $0) }
            report.settledRecords = try Self.settleMerged(connection, before: Date().addingTimeInterval(-retention.jobs), batch: batch)
            report.devices = try drain { Self.staleDevices(retention, batch: $0) }
            report.blobs = try drain { Self.unreferencedBlobs(retention, batch: $0) }
            report.releasedPublicIDs = try drain { Self.unheldPublicIDs(retention, batch: $0) }
            report.orphans = try Self.removeOrphans(connection, drain: drain)
            _ = try drain { Self.forgottenJobs(retention, batch: $0) }
            return report
        }
    }

    /// Runs a batch statement (given the batch size, counting what it removed) until it
    /// removes less than a batch; returns how many it removed in all.
    struct Drain {
        let connection: PGConnection
        let batch: Int

        func callAsFunction(_ statement: (Int) -> PGQuery) throws -> Int {
            var total = 0
            while true {
                let n = Int(try connection.execute(statement(batch)).first?.decode(Int64.self, at: 0) ?? 0)
                total += n
                if n < batch { return total }
            }
        }
    }

    /// Tombstones past their retention, raising each space's purge horizon (cursor) and purge
    /// clock; the files they still counted towards lose a reference each.
    static func tombstones(_ retention: Retention, batch: Int) -> PGQuery {
        return """
            WITH doomed AS (
              SELECT space_id, collection, record_id FROM records
              WHERE deleted AND updated_at < clock_timestamp() - make_interval(secs => \(retention.tombstones))
              ORDER BY updated_at LIMIT \(batch) FOR UPDATE SKIP LOCKED),
            gone AS (
              DELETE FROM records r USING doomed d
              WHERE r.space_id = d.space_id AND r.collection = d.collection AND r.record_id = d.record_id
              RETURNING r.space_id, r.blob_refs, r.version, r.delete_clock COLLATE "C" AS delete_clock),
            -- The files the tombstones still counted towards lose a reference each.
            referencing AS (
              SELECT space_id, sha256, count(*)::integer AS n FROM gone, unnest(gone.blob_refs) AS sha256
              GROUP BY space_id, sha256),
            released AS (
              UPDATE blobs b SET ref_count = greatest(b.ref_count - x.n, 0),
                unreferenced_since = CASE WHEN b.ref_count - x.n <= 0 THEN clock_timestamp() ELSE b.unreferenced_since END
              FROM referencing x WHERE b.space_id = x.space_id AND b.sha256 = x.sha256),
            horizons AS (
              SELECT space_id, max(version) AS version, max(delete_clock) AS clock FROM gone GROUP BY space_id),
            raised AS (
              UPDATE space_counters u SET purge_horizon = greatest(u.purge_horizon, h.version),
                purge_clock = CASE WHEN u.purge_clock IS NULL OR h.clock > u.purge_clock THEN h.clock ELSE u.purge_clock END
              FROM horizons h WHERE u.space_id = h.space_id)
            SELECT count(*) FROM gone
            """
    }

    /// Dead letters past their retention (before the jobs, so that dead jobs become
    /// purgeable).
    static func deadLetters(_ retention: Retention, batch: Int) -> PGQuery {
        deleteBatch(from: "dead_letters", key: ["dead_letter_id"], pastRetention: ["dead_at"], retention.deadLetters, batch: batch)
    }

    /// Finished jobs (and with them their idempotency keys); a dead job only once its dead
    /// letter is gone.
    static func finishedJobs(_ retention: Retention, batch: Int) -> PGQuery {
        deleteBatch(from: "jobs", key: ["job_id"], pastRetention: ["finished_at"], retention.jobs, batch: batch, and: """
            (status IN (\(PGQuery.literal(JobStatus.succeeded.rawValue)), \(PGQuery.literal(JobStatus.discarded.rawValue)))
             OR (status = \(PGQuery.literal(JobStatus.dead.rawValue))
                 AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.job_id = t.job_id)))
            """)
    }

    /// The op ids kept against replays, past the jobs' retention.
    static func opIDs(_ retention: Retention, batch: Int) -> PGQuery {
        deleteBatch(from: "op_ids", key: ["space_id", "op_id"], pastRetention: ["created_at"], retention.jobs, batch: batch)
    }

    /// Settles the increments, adds and removes older than `date` into their fields
    /// (`RecordState.settleMerged`), in batches of records, each its own transaction that
    /// skips records a worker holds: a hot counter's row shrinks to its value. Its horizon
    /// is the jobs' retention, when the op ids that make a retried op a duplicate go too.
    /// The settled state shows the same data, so it takes no new version; a worker that read
    /// the record before and writes after overwrites it with an unsettled state, which
    /// merges the same (the next purge settles it).
    static func settleMerged(_ connection: PGConnection, before date: Date, batch: Int) throws -> Int {
        let milliseconds = Int64(date.timeIntervalSince1970 * 1000)
        let horizon = Stamp(hlc: String(repeating: "0", count: max(0, 13 - String(milliseconds).count)) + String(milliseconds), opID: "")
        var after = (space: SpaceID(UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))), collection: "", id: "")
        var settled = 0
        while true {
            let (read, changed, last) = try connection.transaction { connection in
                let rows = try connection.execute("""
                    SELECT \(sql: ApplyStore.RecordRow.selection) FROM records r
                    WHERE r.merge_state IS NOT NULL
                      AND (r.space_id, r.collection, r.record_id) > (\(after.space)::uuid, \(after.collection), \(after.id))
                    ORDER BY r.space_id, r.collection, r.record_id LIMIT \(Int64(batch)) FOR UPDATE SKIP LOCKED
                    """).map { try $0.decode(as: ApplyStore.RecordRow.self) }
                var settled: [(row: ApplyStore.RecordRow, state: RecordState)] = []
                for row in rows {
                    var state = try row.stored().state
                    if state.settleMerged(before: horizon) { settled.append((row, state)) }
                }
                if !settled.isEmpty {
                    // One statement for the batch, as the apply writes its records.
                    try connection.execute("""
                        UPDATE records r SET field_clocks = u.field_clocks, merge_state = u.merge_state
                        FROM unnest(\(settled.map(\.row.space))::uuid[], \(settled.map(\.row.collection)), \(settled.map(\.row.id)),
                                    \(settled.map { PGJSON(JSONWriter.string(.object($0.state.storedFieldClocks.mapValues { .string($0.description) }))) }),
                                    \(settled.map { StoredMerge.text($0.state.merged).map(PGJSON.init) }))
                          AS u(space_id, collection, record_id, field_clocks, merge_state)
                        WHERE r.space_id = u.space_id AND r.collection = u.collection AND r.record_id = u.record_id
                        """)
                }
                return (rows.count, settled.count, rows.last.map { (space: $0.space, collection: $0.collection, id: $0.id) })
            }
            settled += changed
            guard read == batch, let last else { return settled }
            after = last
        }
    }

    /// Devices revoked, or not seen, for the devices' retention.
    static func staleDevices(_ retention: Retention, batch: Int) -> PGQuery {
        deleteBatch(from: "devices", key: ["device_id"], pastRetention: ["revoked_at", "last_seen_at"], retention.devices, batch: batch)
    }

    /// Files no record of their space referenced for the retention — live, tombstone, or in a
    /// job not applied yet (or dead, and so replayable). A push claims its files at intake
    /// and the apply path counts references under the row lock this delete takes, so neither
    /// races it. The bytes go with the sweeper.
    static func unreferencedBlobs(_ retention: Retention, batch: Int) -> PGQuery {
        let unreferenced = """
            ref_count = 0
            AND unreferenced_since < clock_timestamp() - make_interval(secs => \(retention.blobs))
            AND claimed_at < clock_timestamp() - make_interval(secs => \(retention.blobs))
            """
        return """
            WITH gone AS (
              DELETE FROM blobs b WHERE (space_id, sha256) IN (
                SELECT space_id, sha256 FROM blobs c
                WHERE \(sql: unreferenced)
                  -- Unfinished jobs are few (the jobs_unfinished index holds them); dead
                  -- ones that can be replayed are found through their dead letters.
                  AND NOT EXISTS (
                    SELECT 1 FROM jobs j WHERE j.space_id = c.space_id
                      AND j.status IN (\(literal: JobStatus.queued), \(literal: JobStatus.processing),
                                       \(literal: JobStatus.retrying))
                      AND strpos(j.ops::text, c.sha256) > 0)
                  AND NOT EXISTS (
                    SELECT 1 FROM dead_letters d JOIN jobs j USING (job_id) WHERE d.space_id = c.space_id
                      AND strpos(j.ops::text, c.sha256) > 0)
                LIMIT \(batch) FOR UPDATE SKIP LOCKED)
                AND \(sql: unreferenced)
              RETURNING 1)
            SELECT count(*) FROM gone
            """
    }

    /// A public id held by a record without data (a publish that never got its record, or a
    /// deleted record) is released; its visibility clock stays.
    static func unheldPublicIDs(_ retention: Retention, batch: Int) -> PGQuery {
        return """
            WITH released AS (
              UPDATE records SET public_id = NULL WHERE (space_id, collection, record_id) IN (
                SELECT space_id, collection, record_id FROM records
                WHERE public_id IS NOT NULL AND visibility = \(literal: RecordState.PublicVisibility.private)
                  AND updated_at < clock_timestamp() - make_interval(secs => \(retention.publicIDReservation))
                LIMIT \(batch) FOR UPDATE SKIP LOCKED)
              RETURNING 1)
            SELECT count(*) FROM released
            """
    }

    /// The ids of jobs forgotten with their account, past the jobs' retention.
    static func forgottenJobs(_ retention: Retention, batch: Int) -> PGQuery {
        deleteBatch(from: "forgotten_jobs", key: ["job_id"], pastRetention: ["forgotten_at"], retention.jobs, batch: batch)
    }

    /// Deletes up to a batch of `table`'s rows (matched by their `key` columns) whose time in any of
    /// `columns` is older than `seconds` (and that `condition`, over the table as `t`, picks),
    /// skipping rows another transaction holds; the statement answers how many it deleted.
    static func deleteBatch(
        from table: String, key: [String], pastRetention columns: [String], _ seconds: Double, batch: Int, and condition: String? = nil
    ) -> PGQuery {
        let keyList = key.joined(separator: ", ")
        var query = PGQuery.StringInterpolation(literalCapacity: 256, interpolationCount: columns.count + 1)
        query.appendLiteral("WITH gone AS (\n  DELETE FROM \(table) WHERE (\(keyList)) IN (\n    SELECT \(keyList) FROM \(table) t WHERE (")
        for (index, column) in columns.enumerated() {
            query.appendLiteral("\(index > 0 ? " OR " : "")t.\(column) < clock_timestamp() - make_interval(secs => ")
            query.appendInterpolation(seconds)
            query.appendLiteral(")")
        }
        query.appendLiteral(")\(condition.map { " AND \($0)" } ?? "") LIMIT ")
        query.appendInterpolation(batch)
        query.appendLiteral(" FOR UPDATE SKIP LOCKED)\n  RETURNING 1)\nSELECT count(*) FROM gone")
        return PGQuery(stringInterpolation: query)
    }

    /// A backstop: rows of a space that no longer exists (deleting a space erases them
    /// under its counter's lock, so none should be found). Each table's spaces are listed
    /// by skipping through its index, not by reading every row.
    static func removeOrphans(_ connection: PGConnection, drain: Drain) throws -> Int {
        var removed = 0
        for (table, column) in [("records", "space_id"), ("op_ids", "space_id"), ("forks", "source_space_id")] {
            let orphaned = try connection.execute("""
                WITH RECURSIVE present AS (
                  (SELECT \(sql: column) AS id FROM \(sql: table) ORDER BY \(sql: column) LIMIT 1)
                  UNION ALL
                  SELECT (SELECT \(sql: column) FROM \(sql: table) WHERE \(sql: column) > present.id ORDER BY \(sql: column) LIMIT 1)
                  FROM present WHERE present.id IS NOT NULL)
                SELECT id FROM present
                WHERE id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM spaces s WHERE s.space_id = present.id)
                """).map { try $0.decode(UUID.self, at: 0) }
            guard !orphaned.isEmpty else { continue }
            removed += try drain { batch in """
                WITH gone AS (
                  DELETE FROM \(sql: table) WHERE ctid IN (
                    SELECT ctid FROM \(sql: table) WHERE \(sql: column) = ANY(\(orphaned)) LIMIT \(batch) FOR UPDATE SKIP LOCKED)
                  RETURNING 1)
                SELECT count(*) FROM gone
                """
            }
        }
        return removed
    }
}
