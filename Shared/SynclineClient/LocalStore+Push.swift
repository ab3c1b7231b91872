import Foundation
import GRDB
import SyncModels

/// The outbox's way to the server: batches whose `Idempotency-Key` and body are stored
/// before they are sent, so a retry after a crash or a lost answer sends the same bytes
/// under the same key and never makes a second job.
extension LocalStore {
    struct Batch: Sendable, Equatable {
        let id: String
        let idempotencyKey: String
        let body: Data
        /// The op_ids in body order: `ops[i]` in a 422 names `opIDs[i]`.
        let opIDs: [String]
    }

    /// The batch to send: one formed earlier and not yet answered, else a new one of the
    /// oldest pending ops (at most `maxOps` ops and `maxBytes` of body). nil: nothing to send.
    /// `space`: the shared space the store syncs (nil: the personal space).
    func nextBatch(device: String, space: String?, maxOps: Int, maxBytes: Int) throws -> Batch? {
        try database.write { db in
            if let row = try Self.row(db, sql: "SELECT * FROM batches WHERE job_id IS NULL ORDER BY rowid LIMIT 1") {
                let id: String = row["batch_id"]
                let opIDs = try Self.strings(db, sql: "SELECT op_id FROM outbox WHERE batch_id = ? ORDER BY seq", arguments: [id])
                return Batch(id: id, idempotencyKey: row["idempotency_key"], body: row["body"], opIDs: opIDs)
            }
            // An op waits for its files: the batch ends before the first op referencing a
            // file this device has not uploaded yet (order is kept).
            let rows = try Self.rows(db, sql: """
                SELECT op_id, op, size, EXISTS (
                  SELECT 1 FROM outbox_blobs ob JOIN blobs b USING (sha256)
                  WHERE ob.op_id = outbox.op_id AND b.state <> 'stored') AS waiting
                FROM outbox WHERE state = 'pending' ORDER BY seq LIMIT ?
                """, arguments: [maxOps])
            let scope = space.map { #","space_id":"\#($0)""# } ?? ""
            let envelope = 64 + device.utf8.count + scope.utf8.count
            var chosen: [(id: String, op: String)] = []
            var bytes = envelope
            for row in rows {
                if row["waiting"] as Bool { break }
                let size: Int = row["size"]
                if !chosen.isEmpty && bytes + size + 1 > maxBytes { break }
                chosen.append((row["op_id"], row["op"]))
                bytes += size + 1
            }
            guard !chosen.isEmpty else { return nil }
            let body = Data(#"{"device_id":"\#(device)"\#(scope),"ops":[\#(chosen.map(\.op).joined(separator: ","))]}"#.utf8)
            let batch = Batch(
                id: UUID().uuidString.lowercased(), idempotencyKey: UUID().uuidString.lowercased(), body: body,
                opIDs: chosen.map(\.id))
            try db.execute(
                sql: "INSERT INTO batches (batch_id, idempotency_key, body) VALUES (?, ?, ?)",
                arguments: [batch.id, batch.idempotencyKey, batch.body])
            for opID in batch.opIDs {
                try Self.run(db, sql: "UPDATE outbox SET state = 'batched', batch_id = ? WHERE op_id = ?", arguments: [batch.id, opID])
            }
            return batch
        }
    }

    /// The server took the batch as `jobID`.
    func batchAccepted(_ batch: Batch, jobID: String) throws {
        try database.write { db in
            try Self.run(db, sql: "UPDATE batches SET job_id = ? WHERE batch_id = ?", arguments: [jobID, batch.id])
            try Self.run(db, sql: "UPDATE outbox SET state = 'sent', job_id = ? WHERE batch_id = ?", arguments: [jobID, batch.id])
        }
    }

    /// The server refused the batch (no job was made): op `index` is set aside with
    /// `reason` (every op when `index` is nil), the others go back to the database.
    func batchRefused(_ batch: Batch, setAside index: Int?, reason: String) throws -> [String] {
        try database.write { db in
            let aside = index.map { batch.opIDs.indices.contains($0) ? [batch.opIDs[$0]] : batch.opIDs } ?? batch.opIDs
            for opID in aside {
                try Self.run(db, sql: "UPDATE outbox SET state = 'set_aside', reason = ?, batch_id = NULL WHERE op_id = ?", arguments: [reason, opID])
            }
            try Self.run(db, sql: "UPDATE outbox SET state = 'pending', batch_id = NULL WHERE batch_id = ?", arguments: [batch.id])
            try Self.run(db, sql: "DELETE FROM batches WHERE batch_id = ?", arguments: [batch.id])
            try Self.refresh(db, ops: aside)
            return aside
        }
    }

    /// Sets aside every op still waiting to be sent that `refuse` gives a reason for (a new
    /// version of the rules refuses it); returns them with their reasons.
    func setAsideRefused(_ refuse: (Op) -> String?) throws -> [(opID: String, reason: String)] {
        try database.write { db in
            var aside: [(opID: String, reason: String)] = []
            for row in try Self.rows(db, sql: "SELECT op_id, op FROM outbox WHERE state = 'pending' ORDER BY seq") {
                guard let op = (try? JSONParser.parse(row["op"] as String)).flatMap(Op.init(stored:)), let reason = refuse(op) else { continue }
                try Self.run(db, sql: "UPDATE outbox SET state = 'set_aside', reason = ? WHERE op_id = ?", arguments: [reason, op.opID])
                aside.append((op.opID, reason))
            }
            try Self.refresh(db, ops: aside.map(\.opID))
            return aside
        }
    }

    /// Takes a batch apart without setting anything aside (to form smaller ones).
    func batchDissolved(_ batch: Batch) throws {
        try database.write { db in
            try Self.run(db, sql: "UPDATE outbox SET state = 'pending', batch_id = NULL WHERE batch_id = ?", arguments: [batch.id])
            try Self.run(db, sql: "DELETE FROM batches WHERE batch_id = ?", arguments: [batch.id])
        }
    }

    /// Jobs sent and not yet finished that hold an increment, add or remove of one of `keys`.
    func sentMergingJobs(touching keys: Set<RecordKey>) throws -> [String] {
        let rows = try database.read { db in
            try Self.rows(db, sql: """
                SELECT DISTINCT job_id, collection, record_id FROM outbox
                WHERE state = 'sent' AND job_id IS NOT NULL AND json_extract(op, '$.field') IS NOT NULL
                """)
        }
        return Set(rows.filter { keys.contains(RecordKey(collection: $0["collection"], id: $0["record_id"])) }.map { $0["job_id"] as String })
            .sorted()
    }

    /// Jobs sent and not yet finished.
    func sentJobs() throws -> [String] {
        try database.read { try Self.strings($0, sql: "SELECT DISTINCT job_id FROM outbox WHERE state = 'sent' AND job_id IS NOT NULL") }
    }

    /// A job succeeded: applied, superseded and duplicate ops wait for a pull to reach the
    /// checkpoint; conflicting and rejected ones leave (the server did not apply them). An
    /// op the results do not name was applied.
    func jobSucceeded(_ jobID: String, checkpoint: Int64, results: [OpResult]) throws -> [SyncEvent] {
        try database.write { db in
            var events: [SyncEvent] = []
            var gone: [String] = []
            for result in results {
                switch result.status {
                case .applied, .superseded, .duplicate:
                    try db.execute(
                        sql: "UPDATE outbox SET state = 'confirmed', checkpoint = ?, applied_version = ? WHERE op_id = ? AND job_id = ?",
                        arguments: [checkpoint, result.status == .applied ? result.version : 0, result.opID, jobID])
                case .conflict:
                    events.append(.conflict(opID: result.opID, current: result.current))
                    gone.append(result.opID)
                case .rejected:
                    events.append(.rejected(opID: result.opID, reason: result.reason ?? "rejected"))
                    gone.append(result.opID)
                }
            }
            let keys = try Self.keys(db, ops: gone)
            for opID in gone { try Self.run(db, sql: "DELETE FROM outbox WHERE op_id = ?", arguments: [opID]) }
            // An op the results do not name was applied: an untroubled job's outcome heard on
            // the stream comes without results.
            try Self.run(db, sql: "UPDATE outbox SET state = 'confirmed', checkpoint = ? WHERE job_id = ? AND state = 'sent'",
                         arguments: [checkpoint, jobID])
            // Increments, adds and removes now known to be in the server's record (pulled
            // before their outcome was heard) stop counting on top of it.
            let merging = try Self.rows(db, sql: """
                SELECT DISTINCT collection, record_id FROM outbox WHERE job_id = ? AND json_extract(op, '$.field') IS NOT NULL
                """, arguments: [jobID]).map { RecordKey(collection: $0["collection"], id: $0["record_id"]) }
            for key in Set(keys + merging) { try Self.refresh(db, key) }
            // Records whose edits the server confirmed show no pending edit any more (an edit
            // of theirs set aside earlier still shows as such).
            try Self.run(db, sql: """
                UPDATE records SET pending = 0, set_aside_reason = (
                  SELECT coalesce(o.reason, 'refused') FROM outbox o
                  WHERE o.collection = records.collection AND o.record_id = records.id AND o.state = 'set_aside'
                  ORDER BY o.seq LIMIT 1)
                WHERE pending AND (collection, id) IN (SELECT collection, record_id FROM outbox WHERE job_id = ? AND state = 'confirmed')
                  AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.collection = records.collection AND o.record_id = records.id
                                  AND o.state IN \(Self.unconfirmedStates))
                """, arguments: [jobID])
            try Self.run(db, sql: "DELETE FROM batches WHERE job_id = ?", arguments: [jobID])
            return events
        }
    }

    /// A job was dead-lettered (or discarded): its ops are set aside.
    func jobDead(_ jobID: String, reason: String) throws -> [String] {
        try database.write { db in
            let opIDs = try Self.strings(db, sql: "SELECT op_id FROM outbox WHERE job_id = ? AND state = 'sent'", arguments: [jobID])
            try Self.run(db, sql: "UPDATE outbox SET state = 'set_aside', reason = ? WHERE job_id = ? AND state = 'sent'", arguments: [reason, jobID])
            try Self.run(db, sql: "DELETE FROM batches WHERE job_id = ?", arguments: [jobID])
            try Self.refresh(db, ops: opIDs)
            return opIDs
        }
    }

    /// The server no longer knows the job (purged after its retention): its ops go back to
    /// the queue; ops it had applied answer `duplicate` the second time.
    func jobForgotten(_ jobID: String) throws {
        try database.write { db in
            try Self.run(db, sql: "UPDATE outbox SET state = 'pending', job_id = NULL, batch_id = NULL WHERE job_id = ? AND state = 'sent'", arguments: [jobID])
            try Self.run(db, sql: "DELETE FROM batches WHERE job_id = ?", arguments: [jobID])
        }
    }

    static func keys(_ db: Database, ops opIDs: [String]) throws -> [RecordKey] {
        guard !opIDs.isEmpty else { return [] }
        let marks = Array(repeating: "?", count: opIDs.count).joined(separator: ",")
        return try Row.fetchAll(
            db, sql: "SELECT DISTINCT collection, record_id FROM outbox WHERE op_id IN (\(marks))", arguments: StatementArguments(opIDs)
        ).map { RecordKey(collection: $0["collection"], id: $0["record_id"]) }
    }

    static func refresh(_ db: Database, ops opIDs: [String]) throws {
        for key in try keys(db, ops: opIDs) { try refresh(db, key) }
    }
}
