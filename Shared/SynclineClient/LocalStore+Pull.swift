import Foundation
import GRDB
import SyncModels

/// Pulled pages land here: each page, its cursor and what it changes on screen in one
/// transaction. A resync (after 410) refills the server's records in a new generation and
/// drops what the server no longer has at its end, never touching unpushed ops.
extension LocalStore {
    var cursor: String? { get throws { try meta("cursor") } }

    /// Starts a resync from the beginning; survives a restart midway.
    func beginResync() throws {
        try database.write { db in
            let generation = (try Self.string(db, sql: "SELECT value FROM meta WHERE key = 'generation'").flatMap { Int($0) } ?? 0) + 1
            try Self.setMeta(db, "generation", String(generation))
            try Self.setMeta(db, "resync", "1")
            try Self.setMeta(db, "cursor", nil)
        }
    }

    /// Stores one page; returns the records that changed on screen.
    func applyPage(_ changes: [RecordView], cursor: String, hasMore: Bool) throws -> Set<RecordKey> {
        try database.write { db in
            let generation = try Self.string(db, sql: "SELECT value FROM meta WHERE key = 'generation'").flatMap { Int($0) } ?? 0
            var clock = try Self.clock(db)
            var touched = Set<RecordKey>()
            for change in changes {
                try Self.run(db, sql: """
                    INSERT OR REPLACE INTO server_records
                      (collection, id, version, data, hlc, visibility, public_id, can_fork, published_at, forked_from, generation)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """, arguments: [
                        change.collection, change.id, change.version, change.data.map { JSONWriter.string(.object($0)) },
                        change.hlc, change.visibility.rawValue, change.publicID, change.canFork, change.publishedAt,
                        change.forkedFrom, generation,
                    ])
                if let hlc = change.hlc.flatMap(HLC.init) { clock.observe(hlc) }
                touched.insert(RecordKey(collection: change.collection, id: change.id))
            }
            try Self.setClock(db, clock)
            try Self.setMeta(db, "cursor", cursor)
            // Confirmed ops the pulled state now includes.
            let reached = try Self.rows(db, sql: """
                SELECT collection, record_id FROM outbox WHERE state = 'confirmed' AND checkpoint <= ?
                """, arguments: [Int64(cursor) ?? 0])
            touched.formUnion(reached.map { RecordKey(collection: $0["collection"], id: $0["record_id"]) })
            try Self.run(db, sql: "DELETE FROM outbox WHERE state = 'confirmed' AND checkpoint <= ?", arguments: [Int64(cursor) ?? 0])
            try Self.run(db, sql: "DELETE FROM outbox_blobs WHERE NOT EXISTS (SELECT 1 FROM outbox o WHERE o.op_id = outbox_blobs.op_id)")
            if !hasMore, try Self.string(db, sql: "SELECT value FROM meta WHERE key = 'resync'") != nil {
                let stale = try Self.rows(db, sql: "SELECT collection, id FROM server_records WHERE generation < ?", arguments: [generation])
                touched.formUnion(stale.map { RecordKey(collection: $0["collection"], id: $0["id"]) })
                try Self.run(db, sql: "DELETE FROM server_records WHERE generation < ?", arguments: [generation])
                try Self.setMeta(db, "resync", nil)
            }
            let edited = Set(try Self.rows(db, sql: "SELECT DISTINCT collection, record_id FROM outbox WHERE state IN \(Self.activeStates)")
                .map { RecordKey(collection: $0["collection"], id: $0["record_id"]) })
            let pulled = Dictionary(changes.map { (RecordKey(collection: $0.collection, id: $0.id), $0) }, uniquingKeysWith: { $1 })
            for key in touched {
                if !edited.contains(key), let change = pulled[key] {
                    try Self.store(db, change, pending: false)  // the common case: no local edit to merge
                } else {
                    try Self.refresh(db, key)
                }
            }
            return touched
        }
    }
}
