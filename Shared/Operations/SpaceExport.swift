import BlobStorage
import Foundation
import PQBridge
import Persistence
import SyncModels

/// Writes spaces as NDJSON, one line per thing, streamed (no space is held in memory):
///
///     {"type":"export","format":1,"exported_at":…,"generation":…}
///     {"type":"space","space_id":…,"name":…,"personal_of":…,"counter":…,"purge_clock":…}
///     {"type":"member","space_id":…,"user_id":…,"role":…}
///     {"type":"file","space_id":…,"sha256":…,"size":…,"content_type":…}
///     {"type":"record","space_id":…,"collection":…,"record_id":…,"deleted":…,"data":…,
///      "field_clocks":…,"merge_state":…,"write_clock":…,"delete_clock":…,…}
///     {"type":"end","spaces":…,"records":…,"files":…}
///
/// Records keep their clocks (field clocks, write, delete and floor clocks), what their
/// counters and sets keep to merge, and tombstones,
/// so a copy imported elsewhere merges an old device's ops exactly as the original would.
/// Each space is read in one snapshot (`REPEATABLE READ`), in pages of 1,000 records.
public struct SpaceExport: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    /// The record columns an export carries (a publication does not travel: a public id is
    /// unique in its deployment).
    static let recordColumns = [
        "collection", "record_id", "deleted", "data", "field_clocks", "merge_state", "floor_clock", "write_clock", "delete_clock", "updated_at",
        "updated_by", "forked_from", "fork_clock", "blob_refs", "created_by", "changed_by",
    ]

    public struct Counts: @unchecked Sendable, Equatable {
        public var spaces = 0
        public var records = 0
        public var files: [(space: SpaceID, file: BlobCatalog.Listed)] = []

        public static func == (lhs: Counts, rhs: Counts) -> Bool {
            lhs.spaces == rhs.spaces && lhs.records == rhs.records && lhs.files.map(\.file) == rhs.files.map(\.file)
        }
    }

    /// The spaces `user` is a member of.
    public func spaces(of user: UserID) async throws -> [SpaceID] {
        try await pool.execute("SELECT space_id FROM space_members WHERE user_id = \(user) ORDER BY joined_at, space_id")
            .map { try $0.decode(SpaceID.self, at: 0) }
    }

    /// Writes the spaces, each line through `write` (with its newline); answers what was
    /// written, the files' metadata included (their bytes are the caller's to copy).
    public func write(spaces: [SpaceID], to sink: ExportSink) async throws -> Counts {
        let write = sink.write
        let generation = try await DeploymentStore(pool: pool).generation()
        var header: [String: JSONValue] = ["type": "export", "format": 1, "generation": .int(generation)]
        header["exported_at"] = .string(ISO8601DateFormatter().string(from: Date()))
        try write(JSONWriter.string(.object(header)) + "\n")
        var counts = Counts()
        for space in spaces {
            let written = try await pool.withConnection { connection in
                try connection.transaction { connection in
                    try connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    var counts = Counts()
                    try Self.write(space: space, connection, counts: &counts, to: sink.write)
                    return counts
                }
            }
            counts.spaces += written.spaces
            counts.records += written.records
            counts.files += written.files
        }
        defer { try? sink.flush() }
        try write(JSONWriter.string(.object([
            "type": "end", "spaces": .int(Int64(counts.spaces)), "records": .int(Int64(counts.records)),
            "files": .int(Int64(counts.files.count)),
        ])) + "\n")
        return counts
    }

    static func write(space: SpaceID, _ connection: PGConnection, counts: inout Counts, to write: (String) throws -> Void) throws {
        guard let row = try connection.execute("""
            SELECT json_build_object('type', 'space', 'space_id', s.space_id, 'name', s.name, 'personal_of', s.personal_of,
                                     'counter', coalesce(c.counter, 0), 'purge_clock', c.purge_clock)::text
            FROM spaces s LEFT JOIN space_counters c USING (space_id) WHERE s.space_id = \(space)
            """).first else { return }
        try write(try row.decode(String.self, at: 0) + "\n")
        counts.spaces += 1
        for row in try connection.execute("""
            SELECT json_build_object('type', 'member', 'space_id', space_id, 'user_id', user_id, 'role', role)::text
            FROM space_members WHERE space_id = \(space) ORDER BY joined_at, user_id
            """) {
            try write(try row.decode(String.self, at: 0) + "\n")
        }
        for row in try connection.execute("""
            SELECT sha256, size, content_type, object_id, store, ref_count, syncline_rfc3339(created_at) AS created_at,
                   json_build_object('type', 'file', 'space_id', space_id, 'sha256', sha256, 'size', size,
                                     'content_type', content_type)::text AS line
            FROM blobs WHERE space_id = \(space) ORDER BY sha256
            """) {
            counts.files.append((space, try row.decode(as: BlobCatalog.Listed.self)))
            try write(try row.decode(String.self, at: 7) + "\n")
        }
        let fields = recordColumns.map { "'\($0)', r.\($0)" }.joined(separator: ", ")
        try connection.execute("""
            DECLARE export_records NO SCROLL CURSOR FOR
            SELECT json_build_object('type', 'record', 'space_id', r.space_id, \(sql: fields))::text
            FROM records r WHERE r.space_id = \(space) AND \(sql: BackendRecordStore.holdsData)
            ORDER BY r.version
            """)
        while true {
            let rows = try connection.execute("FETCH 1000 FROM export_records")
            if rows.count == 0 { break }
            for row in rows { try write(try row.decode(String.self, at: 0) + "\n") }
            counts.records += rows.count
        }
        try connection.execute("CLOSE export_records")
    }

    /// Copies the files' bytes into `directory`, one file per hash (a hash in two spaces is copied once).
    public func copyFiles(_ files: [(space: SpaceID, file: BlobCatalog.Listed)], stores: BlobStores, to directory: URL) async throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var copied = Set<String>()
        for (_, file) in files where copied.insert(file.sha256).inserted {
            guard let kind = BlobStoreKind(rawValue: file.store), let store = stores.store(kind) else {
                throw UnexpectedAnswer("the file \(file.sha256) is in the \(file.store) store, which this process cannot read")
            }
            let path = directory.appendingPathComponent(file.sha256)
            FileManager.default.createFile(atPath: path.path, contents: nil)
            let handle = try FileHandle(forWritingTo: path)
            defer { try? handle.close() }
            try await store.read(object: file.objectID, sha256: file.sha256, sealed: true, range: 0..<file.size) { piece in
                try handle.write(contentsOf: piece)
            }
        }
    }
}

/// Where an export's lines go: a file or standard output, written 64 KiB at a time. Used
/// by one export at a time.
public final class ExportSink: @unchecked Sendable {
    let handle: FileHandle
    var pending: [UInt8] = []

    public init(handle: FileHandle) {
        self.handle = handle
        pending.reserveCapacity(1 << 16)
    }

    public func write(_ line: String) throws {
        pending.append(contentsOf: line.utf8)
        if pending.count >= 1 << 16 { try flush() }
    }

    public func flush() throws {
        try handle.write(contentsOf: pending)
        pending.removeAll(keepingCapacity: true)
    }
}
