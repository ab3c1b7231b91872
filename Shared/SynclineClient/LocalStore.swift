import Foundation
import GRDB
import SyncModels

/// The device's SQLite file: the server's records as pulled, the outbox, push batches, the
/// cursor, the device identity and the clock — and the records as this device shows them.
/// Every change is one transaction, so the store survives the app being killed at any
/// instant (WAL; a power loss may lose the last moments of writes, as `synchronous=NORMAL`
/// allows). The WAL is checkpointed by the sync loop, not by whichever write happens to
/// fill it, so a write never pays for a checkpoint's two fsyncs.
///
/// Writes are serialized on one connection; reads (queries, observers refreshing their
/// results) run on others at the same time, on the last committed state, so a write never
/// waits for a query.
///
/// A store at `LocalStore.inMemory` (`":memory:"`) lives in memory, for previews and tests:
/// nothing is kept once the client goes, and reads wait for writes (one connection).
final class LocalStore: @unchecked Sendable {
    // @unchecked: GRDB's writers serialize writes and isolate reads themselves.
    let database: any DatabaseWriter
    let path: String
    /// Where an in-memory store keeps its files (deleted with the store); nil on disk.
    private let temporaryFolder: URL?

    /// The path of a store that lives in memory.
    static let inMemory = ":memory:"

    /// Outbox states. `pending` ops wait for a batch; `batched` ones are in a batch not yet
    /// answered with 202; `sent` ones are in a job; `confirmed` ones are applied by the
    /// server and leave once a pull reaches their checkpoint; `setAside` ones were refused.
    enum OpState: String {
        case pending, batched, sent, confirmed, setAside = "set_aside"
    }

    /// States of an op the server has not confirmed (nor refused): what `pendingOps` counts
    /// and what makes a record `.pending`.
    static let unconfirmed: [OpState] = [.pending, .batched, .sent]
    static let unconfirmedStates = sqlList(unconfirmed)

    /// States whose op still shapes what the device shows: a set-aside op keeps showing
    /// until the app retries or drops it.
    static let activeStates = sqlList(unconfirmed + [.confirmed, .setAside])

    static func sqlList(_ states: [OpState]) -> String {
        "(" + states.map { "'\($0.rawValue)'" }.joined(separator: ", ") + ")"
    }

    /// Opens (or creates) the store of one space (`space` nil: the personal space). A store
    /// holds one space for its whole life: opening it for another is refused. `indexes` are
    /// the app's declared indexes: created when missing, and those no longer declared dropped.
    init(path: String, space: String? = nil, indexes: [LocalIndex] = []) throws {
        var configuration = Configuration()
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = 0")
            db.add(function: QuerySQL.foldFunction)
        }
        if path == Self.inMemory {
            let folder = FileManager.default.temporaryDirectory.appendingPathComponent("syncline-\(UUID().uuidString)", isDirectory: true)
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            temporaryFolder = folder
            self.path = folder.appendingPathComponent("store").path
            database = try DatabaseQueue(configuration: configuration)
        } else {
            configuration.journalMode = .wal
            temporaryFolder = nil
            self.path = path
            database = try DatabasePool(path: path, configuration: configuration)
        }
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                CREATE TABLE server_records (
                  collection TEXT NOT NULL, id TEXT NOT NULL, version INTEGER NOT NULL, data TEXT,
                  hlc TEXT, visibility TEXT NOT NULL, public_id TEXT, can_fork INTEGER NOT NULL,
                  published_at TEXT, forked_from TEXT, generation INTEGER NOT NULL,
                  PRIMARY KEY (collection, id));
                CREATE TABLE records (
                  collection TEXT NOT NULL, id TEXT NOT NULL, data TEXT, version INTEGER NOT NULL,
                  pending INTEGER NOT NULL, visibility TEXT NOT NULL, public_id TEXT, can_fork INTEGER NOT NULL,
                  forked_from TEXT, PRIMARY KEY (collection, id));
                CREATE TABLE outbox (
                  seq INTEGER PRIMARY KEY AUTOINCREMENT, op_id TEXT NOT NULL UNIQUE,
                  collection TEXT NOT NULL, record_id TEXT NOT NULL, op TEXT NOT NULL, size INTEGER NOT NULL,
                  state TEXT NOT NULL, batch_id TEXT, job_id TEXT, checkpoint INTEGER, reason TEXT,
                  created_at REAL NOT NULL);
                CREATE INDEX outbox_by_record ON outbox (collection, record_id);
                CREATE INDEX outbox_by_state ON outbox (state, seq);
                CREATE TABLE batches (
                  batch_id TEXT PRIMARY KEY, idempotency_key TEXT NOT NULL, body BLOB NOT NULL, job_id TEXT);
                """)
        }
        migrator.registerMigration("v2: set-aside edits show") { db in
            try db.execute(sql: "ALTER TABLE records ADD COLUMN set_aside_reason TEXT")
        }
        migrator.registerMigration("v3: attachments") { db in
            try db.execute(sql: """
                -- Files this device holds (in the folder beside the database): its own, to
                -- upload ('pending') or uploaded ('stored'), refused by the server
                -- ('refused'), and downloaded ones ('stored'), least recently used first out.
                CREATE TABLE blobs (
                  sha256 TEXT PRIMARY KEY, size INTEGER NOT NULL, content_type TEXT NOT NULL, state TEXT NOT NULL,
                  upload_url TEXT, reason TEXT, last_used REAL NOT NULL);
                -- Which files each op in the outbox references: an op waits for its files.
                CREATE TABLE outbox_blobs (op_id TEXT NOT NULL, sha256 TEXT NOT NULL, PRIMARY KEY (op_id, sha256));
                """)
        }
        migrator.registerMigration("v4: calls' guesses") { db in
            try db.execute(sql: "ALTER TABLE outbox ADD COLUMN guess TEXT")
        }
        migrator.registerMigration("v5: the version a confirmed op took") { db in
            try db.execute(sql: "ALTER TABLE outbox ADD COLUMN applied_version INTEGER")
        }
        migrator.registerMigration("v6: set-aside ops reported") { db in
            try db.execute(sql: "ALTER TABLE outbox ADD COLUMN reported INTEGER NOT NULL DEFAULT 0")
        }
        try migrator.migrate(database)
        let scope = space ?? "personal"
        try database.write { db in
            if let held = try Self.string(db, sql: "SELECT value FROM meta WHERE key = 'space'") {
                guard held == scope else { throw ClientError.otherSpace(held: held) }
            } else {
                try Self.setMeta(db, "space", scope)
            }
            try Self.declare(db, indexes)
        }
    }

    /// The space went away (deleted, or this user is no longer a member): its records,
    /// outbox and cursor go with it. The device identity stays. Returns the collections
    /// that had records, and the ops the server never confirmed (edits that are lost).
    func forgetSpace() throws -> (collections: Set<String>, lost: [String]) {
        try database.write { db in
            let collections = Set(try Self.strings(db, sql: "SELECT DISTINCT collection FROM records"))
            let lost = try Self.strings(db, sql: "SELECT op_id FROM outbox WHERE state IN \(Self.unconfirmedStates) ORDER BY seq")
            for table in ["server_records", "records", "outbox", "batches", "outbox_blobs", "blobs"] {
                try db.execute(sql: "DELETE FROM \(table)")
            }
            for key in ["cursor", "resync", "generation"] { try Self.setMeta(db, key, nil) }
            try Self.setMeta(db, "gone", "1")
            return (collections, lost)
        }
    }

    deinit {
        if let temporaryFolder { try? FileManager.default.removeItem(at: temporaryFolder) }
    }

    /// Whether the space is gone (see `forgetSpace`).
    var spaceGone: Bool { ((try? meta("gone")) ?? nil) != nil }

    // MARK: - Statements (prepared once per connection)

    static func run(_ db: Database, sql: String, arguments: StatementArguments = []) throws {
        try db.cachedStatement(sql: sql).execute(arguments: arguments)
    }

    static func rows(_ db: Database, sql: String, arguments: StatementArguments = []) throws -> [Row] {
        try Row.fetchAll(db.cachedStatement(sql: sql), arguments: arguments)
    }

    static func row(_ db: Database, sql: String, arguments: StatementArguments = []) throws -> Row? {
        try Row.fetchOne(db.cachedStatement(sql: sql), arguments: arguments)
    }

    static func strings(_ db: Database, sql: String, arguments: StatementArguments = []) throws -> [String] {
        try String.fetchAll(db.cachedStatement(sql: sql), arguments: arguments)
    }

    static func string(_ db: Database, sql: String, arguments: StatementArguments = []) throws -> String? {
        try String.fetchOne(db.cachedStatement(sql: sql), arguments: arguments)
    }

    /// Copies the WAL back into the database once it holds more than `limit` bytes.
    func checkpointIfLarge(limit: Int = 4 << 20) throws {
        let size = (try? FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? 0
        guard size > limit else { return }
        try database.writeWithoutTransaction { try $0.execute(sql: "PRAGMA wal_checkpoint(PASSIVE)") }
    }

    /// Closes the database and deletes it with its WAL and its files: the store can no
    /// longer be used (signing out with `wipe`).
    func wipe() throws {
        try database.close()
        for file in [path, path + "-wal", path + "-shm", blobFolder.path] where FileManager.default.fileExists(atPath: file) {
            try FileManager.default.removeItem(atPath: file)
        }
    }

    // MARK: - Meta

    func meta(_ key: String) throws -> String? {
        try database.read { try Self.string($0, sql: "SELECT value FROM meta WHERE key = ?", arguments: [key]) }
    }

    static func setMeta(_ db: Database, _ key: String, _ value: String?) throws {
        if let value {
            try Self.run(db, sql: "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", arguments: [key, value])
        } else {
            try Self.run(db, sql: "DELETE FROM meta WHERE key = ?", arguments: [key])
        }
    }

    func setMeta(_ key: String, _ value: String?) throws {
        try database.write { try Self.setMeta($0, key, value) }
    }

    /// The device's clock state, one row: `<ms> <counter>`.
    static func clock(_ db: Database) throws -> HLCState {
        let parts = try Self.string(db, sql: "SELECT value FROM meta WHERE key = 'hlc'")?.split(separator: " ") ?? []
        return HLCState(
            milliseconds: parts.first.flatMap { Int64($0) } ?? 0, counter: parts.dropFirst().first.flatMap { Int($0) } ?? 0)
    }

    static func setClock(_ db: Database, _ clock: HLCState) throws {
        try setMeta(db, "hlc", "\(clock.milliseconds) \(clock.counter)")
    }

    // MARK: - Local writes

    /// Stamps the op with the device's clock, stores it in the outbox and applies it to the
    /// local record, in one transaction.
    /// `guess`: a call's guess at its outcome, shown as a patch would be and never sent.
    func enqueue(_ op: Op, guess: [String: JSONValue]? = nil, device: String, now: Date) throws -> Op {
        try database.write { db in
            var clock = try Self.clock(db)
            let hlc = clock.next(now: Int64(now.timeIntervalSince1970 * 1000), node: device)
            try Self.setClock(db, clock)
            var op = op
            op.hlc = hlc.description
            let text = JSONWriter.string(op.jsonValue)
            try Self.run(db, sql: """
                INSERT INTO outbox (op_id, collection, record_id, op, size, state, created_at, guess)
                VALUES (?, ?, ?, ?, ?, 'pending', ?, ?)
                """, arguments: [
                    op.opID, op.collection, op.id, text, text.utf8.count, now.timeIntervalSince1970,
                    guess.map { JSONWriter.string(.object($0)) },
                ])
            for sha256 in op.data?.referencedBlobs ?? [] {
                try Self.run(db, sql: "INSERT OR IGNORE INTO outbox_blobs (op_id, sha256) VALUES (?, ?)", arguments: [op.opID, sha256])
            }
            try Self.refresh(db, RecordKey(collection: op.collection, id: op.id))
            return op
        }
    }

    /// Recomputes what the device shows for `key`.
    static func refresh(_ db: Database, _ key: RecordKey) throws {
        let server = try Self.row(
            db, sql: "SELECT * FROM server_records WHERE collection = ? AND id = ?", arguments: [key.collection, key.id]
        ).map(serverView)
        let rows = try Self.rows(db, sql: """
            SELECT op, guess, state, reason, checkpoint, applied_version FROM outbox
            WHERE collection = ? AND record_id = ? AND state IN \(activeStates)
            ORDER BY seq
            """, arguments: [key.collection, key.id])
        let ops = rows.compactMap { row -> Op? in
            guard var op = (try? JSONParser.parse(row["op"] as String)).flatMap(Op.init(stored:)) else { return nil }
            // An increment, add or remove is not idempotent: once the server's record holds
            // it, applying it again would count it twice. It holds it from the version the op
            // took (superseded and duplicate ones: 0, they took none), or, when the job's
            // outcome came without results, from the job's checkpoint.
            if op.field != nil, (row["state"] as String) == OpState.confirmed.rawValue,
               let included = (row["applied_version"] as Int64?) ?? (row["checkpoint"] as Int64?), (server?.version ?? 0) >= included {
                return nil
            }
            // A call shows its guess as a patch would, until the backend's answer is pulled.
            if op.type == .call, let guess = (row["guess"] as String?).flatMap({ try? JSONParser.parse($0) })?.objectValue {
                op.type = .patch
                op.data = guess
            }
            return op
        }
        // Confirmed ops still shape what shows (until the pull brings their effect), but
        // they are no longer pending: the same definition as `status().pendingOps`.
        let unconfirmed = rows.contains { OpState(rawValue: $0["state"]).map(Self.unconfirmed.contains) == true }
        let setAsideReason = rows.first { ($0["state"] as String) == OpState.setAside.rawValue }.map { ($0["reason"] as String?) ?? "refused" }
        if ops.isEmpty, let server {
            try store(db, server, pending: false)
            return
        }
        guard let state = LocalMerge.apply(ops, to: server), state.isShown else {
            try Self.run(db, sql: "DELETE FROM records WHERE collection = ? AND id = ?", arguments: [key.collection, key.id])
            return
        }
        let visibility = state.publicVisibility
        try Self.run(db, sql: """
            INSERT OR REPLACE INTO records (collection, id, data, version, pending, visibility, public_id, can_fork, forked_from,
                                            set_aside_reason)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, arguments: [
                key.collection, key.id, state.visibleData.map(LocalMerge.shownText), server?.version ?? 0,
                unconfirmed, visibility.rawValue, state.shownPublicID, visibility != .private && state.visibility?.canFork == true,
                state.fork?.publicID, unconfirmed ? nil : setAsideReason,
            ])
    }

    /// Shows the server's record as it is (no local edits touch it).
    static func store(_ db: Database, _ server: RecordView, pending: Bool) throws {
        try Self.run(db, sql: """
            INSERT OR REPLACE INTO records (collection, id, data, version, pending, visibility, public_id, can_fork, forked_from)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, arguments: [
                server.collection, server.id, server.data.map(LocalMerge.shownText), server.version, pending,
                server.visibility.rawValue, server.publicID, server.canFork, server.forkedFrom,
            ])
    }

    static func serverView(_ row: Row) -> RecordView {
        let data: String? = row["data"]
        return RecordView(
            collection: row["collection"], id: row["id"], version: row["version"], deleted: data == nil,
            data: data.flatMap { try? JSONParser.parse($0) }?.objectValue, hlc: row["hlc"],
            visibility: RecordState.PublicVisibility(rawValue: row["visibility"]) ?? .private, publicID: row["public_id"],
            canFork: row["can_fork"], publishedAt: row["published_at"], forkedFrom: row["forked_from"])
    }

    // MARK: - Reads

    static func record(_ row: Row) -> LocalRecord {
        let data: String = row["data"]
        return LocalRecord(
            collection: row["collection"], id: row["id"],
            data: (try? JSONParser.parse(data))?.objectValue ?? [:], version: row["version"],
            syncState: row["pending"] ? .pending : (row["set_aside_reason"] as String?).map { .setAside(reason: $0) } ?? .synced,
            visibility: RecordState.PublicVisibility(rawValue: row["visibility"]) ?? .private,
            publicID: row["public_id"], canFork: row["can_fork"], forkedFrom: row["forked_from"])
    }

    /// The collection's records as the device shows them, by id (deleted ones are not).
    func records(in collection: String) throws -> [LocalRecord] {
        try records(RecordQuery(collection))
    }

    func record(_ collection: String, _ id: String) throws -> LocalRecord? {
        try database.read { db in
            try Self.row(
                db, sql: "SELECT * FROM records WHERE collection = ? AND id = ? AND data IS NOT NULL", arguments: [collection, id])
                .map(Self.record)
        }
    }

    func status() throws -> (pending: Int, oldest: Double?, setAside: Int) {
        try database.read { db in
            let row = try Self.row(db, sql: """
                SELECT count(*) FILTER (WHERE state IN \(Self.unconfirmedStates)) AS pending,
                       min(created_at) FILTER (WHERE state IN \(Self.unconfirmedStates)) AS oldest,
                       count(*) FILTER (WHERE state = 'set_aside') AS aside
                FROM outbox
                """)
            return (row?["pending"] ?? 0, row?["oldest"], row?["aside"] ?? 0)
        }
    }

    func setAside() throws -> [SetAsideOp] {
        try database.read { db in
            try Self.rows(db, sql: "SELECT op, reason FROM outbox WHERE state = 'set_aside' ORDER BY seq").compactMap { row in
                guard let op = (try? JSONParser.parse(row["op"] as String)).flatMap(Op.init(stored:)) else { return nil }
                return SetAsideOp(opID: op.opID, collection: op.collection, id: op.id, type: op.type, reason: row["reason"] ?? "")
            }
        }
    }

    /// A set-aside op the server has not been told of.
    struct UnreportedSetAside: Sendable {
        let opID: String, collection: String, recordID: String, jobID: String?, reason: String
    }

    func unreportedSetAside(limit: Int) throws -> [UnreportedSetAside] {
        try database.read { db in
            try Self.rows(db, sql: """
                SELECT op_id, collection, record_id, job_id, reason FROM outbox
                WHERE state = 'set_aside' AND reported = 0 ORDER BY seq LIMIT ?
                """, arguments: [limit]).map { row in
                UnreportedSetAside(
                    opID: row["op_id"], collection: row["collection"], recordID: row["record_id"], jobID: row["job_id"],
                    reason: (row["reason"] as String?).flatMap { $0.isEmpty ? nil : $0 } ?? "refused")
            }
        }
    }

    func markReported(_ opIDs: [String]) throws {
        try database.write { db in
            for opID in opIDs { try Self.run(db, sql: "UPDATE outbox SET reported = 1 WHERE op_id = ?", arguments: [opID]) }
        }
    }

    /// Puts a set-aside op back in the queue (true), or drops it (false); returns its record.
    func resolveSetAside(opID: String, retry: Bool) throws -> RecordKey? {
        try database.write { db in
            guard let row = try Self.row(
                db, sql: "SELECT collection, record_id FROM outbox WHERE op_id = ? AND state = 'set_aside'", arguments: [opID])
            else { return nil }
            if retry {
                try Self.run(
                    db, sql: "UPDATE outbox SET state = 'pending', reason = NULL, batch_id = NULL, job_id = NULL, reported = 0 WHERE op_id = ?",
                    arguments: [opID])
            } else {
                try Self.run(db, sql: "DELETE FROM outbox WHERE op_id = ?", arguments: [opID])
            }
            let key = RecordKey(collection: row["collection"], id: row["record_id"])
            try Self.refresh(db, key)
            return key
        }
    }
}
