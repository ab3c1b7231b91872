import Foundation
import GRDB
import SyncModels

/// The files this device holds, in a folder beside the database named by hash, and what
/// the store knows of them: which wait to be uploaded, which the server refused, which
/// were downloaded (and when last used, for the cache's bound).
extension LocalStore {
    enum BlobState: String {
        /// This device's own, not yet on the server: the ops referencing it wait.
        case pending
        /// On the server; the file here is a copy, evictable once not pending.
        case stored
        /// The server refused it (too large, over quota): the ops referencing it are set aside.
        case refused
    }

    struct LocalBlob: Sendable, Equatable {
        let reference: BlobReference
        let state: BlobState
        let uploadURL: String?
    }

    var blobFolder: URL { URL(fileURLWithPath: path + ".blobs", isDirectory: true) }

    func blobFile(_ sha256: String) -> URL { blobFolder.appendingPathComponent(sha256) }

    /// Records a file of this device's own, placed in the folder: it waits to be uploaded
    /// (unless the store knows it is on the server already).
    func addOwnBlob(_ reference: BlobReference, now: Date) throws {
        try database.write { db in
            try Self.run(db, sql: """
                INSERT INTO blobs (sha256, size, content_type, state, last_used) VALUES (?, ?, ?, 'pending', ?)
                ON CONFLICT (sha256) DO UPDATE SET last_used = excluded.last_used,
                  state = CASE WHEN blobs.state = 'refused' THEN 'pending' ELSE blobs.state END, reason = NULL
                """, arguments: [reference.sha256, reference.size, reference.contentType, now.timeIntervalSince1970])
        }
    }

    /// Records a downloaded file.
    func addDownloadedBlob(_ reference: BlobReference, now: Date) throws {
        try database.write { db in
            try Self.run(db, sql: """
                INSERT INTO blobs (sha256, size, content_type, state, last_used) VALUES (?, ?, ?, 'stored', ?)
                ON CONFLICT (sha256) DO UPDATE SET last_used = excluded.last_used
                """, arguments: [reference.sha256, reference.size, reference.contentType, now.timeIntervalSince1970])
        }
    }

    func localBlob(_ sha256: String) throws -> LocalBlob? {
        try database.read { db in
            try Self.row(db, sql: "SELECT * FROM blobs WHERE sha256 = ?", arguments: [sha256]).map(Self.localBlob)
        }
    }

    static func localBlob(_ row: Row) -> LocalBlob {
        LocalBlob(
            reference: BlobReference(sha256: row["sha256"], size: row["size"], contentType: row["content_type"]),
            state: BlobState(rawValue: row["state"]) ?? .pending, uploadURL: row["upload_url"])
    }

    /// Files waiting to be uploaded, oldest use first.
    func pendingBlobs() throws -> [LocalBlob] {
        try database.read { db in
            try Self.rows(db, sql: "SELECT * FROM blobs WHERE state = 'pending' ORDER BY last_used").map(Self.localBlob)
        }
    }

    func pendingUploadTotals() throws -> (count: Int, bytes: Int64) {
        try database.read { db in
            let row = try Self.row(db, sql: "SELECT count(*) AS n, coalesce(sum(size), 0) AS bytes FROM blobs WHERE state = 'pending'")
            return (row?["n"] ?? 0, row?["bytes"] ?? 0)
        }
    }

    func touchBlob(_ sha256: String, now: Date) throws {
        try database.write { db in
            try Self.run(db, sql: "UPDATE blobs SET last_used = ? WHERE sha256 = ?", arguments: [now.timeIntervalSince1970, sha256])
        }
    }

    /// Where a resumable upload of the file stands on the server (nil: none begun).
    func setUploadURL(_ sha256: String, _ url: String?) throws {
        try database.write { db in
            try Self.run(db, sql: "UPDATE blobs SET upload_url = ? WHERE sha256 = ?", arguments: [url, sha256])
        }
    }

    /// The server holds the file: the ops waiting for it may go.
    func blobUploaded(_ sha256: String) throws {
        try database.write { db in
            try Self.run(db, sql: "UPDATE blobs SET state = 'stored', upload_url = NULL WHERE sha256 = ?", arguments: [sha256])
        }
    }

    /// The server refused the file: every op still waiting that references it is set aside
    /// with `reason`; returns them. The ops around them go on.
    func blobRefused(_ sha256: String, reason: String) throws -> [String] {
        try database.write { db in
            try Self.run(db, sql: "UPDATE blobs SET state = 'refused', reason = ?, upload_url = NULL WHERE sha256 = ?", arguments: [reason, sha256])
            return try Self.setAsideWaiting(db)
        }
    }

    /// Sets aside the pending ops that reference a refused file (written after it was
    /// refused, or put back by `retry`).
    func setAsideOpsOfRefusedBlobs() throws -> [(opID: String, reason: String)] {
        // Every sync pass asks: a read answers when there is nothing to do, as there mostly is.
        let waiting = try database.read { db in
            try Self.row(db, sql: """
                SELECT 1 FROM outbox_blobs ob JOIN blobs b USING (sha256)
                WHERE b.state = 'refused' AND ob.op_id IN (SELECT op_id FROM outbox WHERE state = 'pending') LIMIT 1
                """) != nil
        }
        guard waiting else { return [] }
        return try database.write { db in
            let rows = try Self.rows(db, sql: """
                SELECT o.op_id, b.reason FROM outbox o JOIN outbox_blobs ob USING (op_id) JOIN blobs b USING (sha256)
                WHERE o.state = 'pending' AND b.state = 'refused'
                """)
            _ = try Self.setAsideWaiting(db)
            return rows.map { ($0["op_id"], $0["reason"] ?? "the server refused a file it references") }
        }
    }

    private static func setAsideWaiting(_ db: Database) throws -> [String] {
        let rows = try Self.rows(db, sql: """
            SELECT DISTINCT o.op_id, b.reason FROM outbox o JOIN outbox_blobs ob USING (op_id) JOIN blobs b USING (sha256)
            WHERE o.state = 'pending' AND b.state = 'refused'
            """)
        let opIDs: [String] = rows.map { $0["op_id"] }
        for row in rows {
            try Self.run(db, sql: "UPDATE outbox SET state = 'set_aside', reason = ? WHERE op_id = ?", arguments: [row["reason"] as String?, row["op_id"] as String])
        }
        try Self.refresh(db, ops: opIDs)
        return opIDs
    }

    /// The server lacks a file an op references (409 `blob_missing`): when this device
    /// holds it, it is uploaded again; false when it does not.
    func blobMissing(_ sha256: String) throws -> Bool {
        guard FileManager.default.fileExists(atPath: blobFile(sha256).path) else { return false }
        return try database.write { db in
            try Self.run(db, sql: "UPDATE blobs SET state = 'pending', upload_url = NULL WHERE sha256 = ?", arguments: [sha256])
            return db.changesCount > 0
        }
    }

    /// Removes the least recently used files the server holds until the folder's
    /// downloaded and uploaded files take at most `maxBytes` (files waiting to be uploaded
    /// are never removed); returns the hashes removed.
    func evictBlobs(maxBytes: Int64) throws -> [String] {
        let evicted: [String] = try database.write { db in
            let rows = try Self.rows(db, sql: "SELECT sha256, size FROM blobs WHERE state = 'stored' ORDER BY last_used DESC")
            var kept: Int64 = 0
            var gone: [String] = []
            for row in rows {
                let size: Int64 = row["size"]
                if kept + size <= maxBytes {
                    kept += size
                } else {
                    gone.append(row["sha256"])
                }
            }
            for sha256 in gone { try Self.run(db, sql: "DELETE FROM blobs WHERE sha256 = ?", arguments: [sha256]) }
            return gone
        }
        for sha256 in evicted { try? FileManager.default.removeItem(at: blobFile(sha256)) }
        return evicted
    }
}
