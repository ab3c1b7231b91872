import BlobStorage
import Foundation
import NIOCore
import PQBridge
import Persistence
import SyncModels

/// Loads an export (`SpaceExport`) into new spaces of this deployment: each space gets a
/// new id, its members, its files (from the directory the export's files were copied to)
/// and its records with their clocks and tombstones, numbered from version 1 in the order
/// they were exported. Read line by line and written 1,000 records at a time: memory stays
/// flat whatever the size. A personal space arrives as a shared space its user owns.
public struct SpaceImport: Sendable {
    let pool: PGPool
    let ingest: BlobIngest

    public init(pool: PGPool, ingest: BlobIngest) {
        self.pool = pool
        self.ingest = ingest
    }

    public struct Invalid: Error, CustomStringConvertible {
        public let description: String
        init(line: Int, _ message: String) { description = "line \(line): \(message)" }
    }

    public struct Imported: Sendable, Equatable, Encodable {
        /// Each exported space's id, and the id of its copy here.
        public var spaces: [String: String] = [:]
        public var records = 0
        public var files = 0
        /// Files the export names whose bytes were not given (`--files`).
        public var filesSkipped = 0

        enum CodingKeys: String, CodingKey { case spaces, records, files, filesSkipped = "files_skipped" }
    }

    /// The space being loaded.
    private struct Current {
        let id: SpaceID
        var owner: UserID?
        var version: Int64 = 0
        var records: [String] = []
        let purgeClock: String?
    }

    /// Loads every line `next` gives (nil at the end). `files`: where the export's file
    /// bytes are, one per hash.
    public func run(files: URL?, next: () throws -> String?) async throws -> Imported {
        var imported = Imported()
        do {
            return try await load(files: files, next: next, into: &imported)
        } catch {
            // Nothing of a refused or failed import stays: its spaces go with all they hold.
            let created = imported.spaces.values.compactMap(SpaceID.init)
            try? await pool.transaction { connection in try SpaceStore.erase(connection, spaces: created) }
            throw error
        }
    }

    private func load(files: URL?, next: () throws -> String?, into imported: inout Imported) async throws -> Imported {
        var current: Current?
        var number = 0
        var ended = false
        while let line = try next() {
            number += 1
            if line.isEmpty { continue }
            guard !ended else { throw Invalid(line: number, "nothing may follow the end line") }
            guard let object = (try? JSONParser.parse(Data(line.utf8)))?.objectValue, let type = object["type"]?.stringValue else {
                throw Invalid(line: number, "not an export line (a JSON object with a type)")
            }
            if number == 1 {
                guard type == "export", object["format"]?.intValue == 1 else {
                    throw Invalid(line: number, "not a Syncline export of format 1")
                }
                continue
            }
            switch type {
            case "space":
                if let done = current { try await finish(done, imported: &imported) }
                guard let old = object["space_id"]?.stringValue, let name = object["name"]?.stringValue else {
                    throw Invalid(line: number, "a space needs space_id and name")
                }
                let id = SpaceID.random()
                try await pool.execute("INSERT INTO spaces (space_id, name) VALUES (\(id), \(name))")
                imported.spaces[old] = id.description
                current = Current(id: id, purgeClock: object["purge_clock"]?.stringValue)
            case "member":
                guard var space = current, let user = object["user_id"]?.stringValue, let role = object["role"]?.stringValue,
                      let parsed = SpaceRole(rawValue: role), SpaceRole.memberRoles.contains(parsed)
                else { throw Invalid(line: number, "a member needs a space before it, user_id and role") }
                try await pool.execute("""
                    INSERT INTO space_members (space_id, user_id, role) VALUES (\(space.id), \(user), \(role)) ON CONFLICT DO NOTHING
                    """)
                if parsed == .owner, space.owner == nil { space.owner = UserID(user) }
                current = space
            case "file":
                guard let space = current, let sha256 = object["sha256"]?.stringValue, sha256.utf8.count == 64,
                      sha256.utf8.allSatisfy({ (48...57).contains($0) || (97...102).contains($0) }),
                      let contentType = object["content_type"]?.stringValue
                else { throw Invalid(line: number, "a file needs a space before it, sha256 and content_type") }
                guard let files else {
                    imported.filesSkipped += 1
                    continue
                }
                guard let owner = space.owner else { throw Invalid(line: number, "a space's files come after its owner") }
                let path = files.appendingPathComponent(sha256)
                guard FileManager.default.fileExists(atPath: path.path) else {
                    throw Invalid(line: number, "the file \(sha256) is not in \(files.path)")
                }
                switch try await ingest.put(space: space.id, user: owner, sha256: sha256, contentType: contentType, body: FilePieces(path: path)) {
                case .created, .existing: imported.files += 1
                case let other: throw Invalid(line: number, "the file \(sha256) was not taken: \(other)")
                }
            case "record":
                guard var space = current else { throw Invalid(line: number, "a record needs a space before it") }
                guard object["collection"]?.stringValue.map(Names.isValidCollection) == true,
                      object["record_id"]?.stringValue.map(Names.isValidRecordID) == true
                else { throw Invalid(line: number, "a record needs a collection and a record_id") }
                space.records.append(line)
                if space.records.count >= 1000 { try await flush(&space, imported: &imported) }
                current = space
            case "end":
                if let done = current { try await finish(done, imported: &imported) }
                current = nil
                guard object["records"]?.intValue == Int64(imported.records) else {
                    throw Invalid(line: number, "the export says \(object["records"]?.intValue ?? 0) records; \(imported.records) were read")
                }
                ended = true
            default:
                throw Invalid(line: number, "unknown line type \(type)")
            }
        }
        guard ended else { throw Invalid(line: number, "the export ends early (no end line): it was cut short") }
        return imported
    }

    /// Writes the buffered records, numbered on from the space's last version.
    private func flush(_ space: inout Current, imported: inout Imported) async throws {
        guard !space.records.isEmpty else { return }
        let batch = "[" + space.records.joined(separator: ",") + "]"
        try await pool.execute("""
            INSERT INTO records (space_id, collection, record_id, version, deleted, data, field_clocks, merge_state, floor_clock, write_clock,
                                 delete_clock, updated_at, updated_by, forked_from, fork_clock, blob_refs, created_by, changed_by)
            SELECT \(space.id), e.value ->> 'collection', e.value ->> 'record_id', \(space.version) + e.n,
                   (e.value ->> 'deleted')::boolean, coalesce(e.value -> 'data', '{}'), coalesce(e.value -> 'field_clocks', '{}'),
                   CASE WHEN jsonb_typeof(e.value -> 'merge_state') = 'object' THEN e.value -> 'merge_state' END,
                   e.value ->> 'floor_clock', e.value ->> 'write_clock', e.value ->> 'delete_clock',
                   coalesce((e.value ->> 'updated_at')::timestamptz, clock_timestamp()), (e.value ->> 'updated_by')::uuid,
                   e.value ->> 'forked_from', e.value ->> 'fork_clock',
                   CASE WHEN jsonb_typeof(e.value -> 'blob_refs') = 'array'
                        THEN ARRAY(SELECT jsonb_array_elements_text(e.value -> 'blob_refs')) END,
                   e.value ->> 'created_by', e.value ->> 'changed_by'
            FROM jsonb_array_elements(\(batch)::jsonb) WITH ORDINALITY AS e(value, n)
            """)
        space.version += Int64(space.records.count)
        imported.records += space.records.count
        space.records.removeAll(keepingCapacity: true)
    }

    /// The space's last records, its counter, and its files' reference counts.
    private func finish(_ space: Current, imported: inout Imported) async throws {
        var space = space
        try await flush(&space, imported: &imported)
        try await pool.execute("""
            INSERT INTO space_counters (space_id, counter, purge_clock) VALUES (\(space.id), \(space.version), \(space.purgeClock))
            ON CONFLICT (space_id) DO UPDATE SET counter = EXCLUDED.counter, purge_clock = EXCLUDED.purge_clock
            """)
        try await pool.execute("""
            UPDATE blobs b SET ref_count = n.count,
              unreferenced_since = CASE WHEN n.count > 0 THEN NULL ELSE coalesce(b.unreferenced_since, clock_timestamp()) END
            FROM (SELECT b.sha256, (SELECT count(*) FROM records r WHERE r.space_id = b.space_id AND b.sha256 = ANY(r.blob_refs))::int AS count
                  FROM blobs b WHERE b.space_id = \(space.id)) n
            WHERE b.space_id = \(space.id) AND b.sha256 = n.sha256
            """)
    }
}

/// A file's bytes as the pieces an upload's body gives, read 1 MiB at a time.
struct FilePieces: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let path: URL

    struct AsyncIterator: AsyncIteratorProtocol {
        let handle: FileHandle?

        mutating func next() async throws -> ByteBuffer? {
            guard let handle, let data = try handle.read(upToCount: BlobChunking.bytes), !data.isEmpty else {
                try handle?.close()
                return nil
            }
            return ByteBuffer(bytes: data)
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(handle: try? FileHandle(forReadingFrom: path)) }
}

/// Lines of a file or of standard input, read 64 KiB at a time (a line may be of any length).
public final class LineReader {
    let handle: FileHandle
    var buffer: [UInt8] = []
    /// Where the next line starts in `buffer`.
    var start = 0
    var finished = false

    public init(handle: FileHandle) { self.handle = handle }

    public func next() throws -> String? {
        var searched = start
        while true {
            if let newline = buffer[searched...].firstIndex(of: 0x0A) {
                let line = String(decoding: buffer[start..<newline], as: UTF8.self)
                start = newline + 1
                return line
            }
            searched = buffer.count
            if finished {
                guard start < buffer.count else { return nil }
                defer { start = buffer.count }
                return String(decoding: buffer[start...], as: UTF8.self)
            }
            // What was read is dropped before reading more: the buffer holds one line and a piece.
            if start > 0 {
                buffer.removeFirst(start)
                searched -= start
                start = 0
            }
            if let data = try handle.read(upToCount: 1 << 16), !data.isEmpty {
                buffer.append(contentsOf: data)
            } else {
                finished = true
            }
        }
    }
}
