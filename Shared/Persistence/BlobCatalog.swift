import Foundation
import PQBridge
import SyncModels

/// What is known of files: which space holds which hash, in which object and store; the
/// resumable uploads under way; the objects waiting to be removed. The bytes themselves
/// are a `BlobStore`'s.
public struct BlobCatalog: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    /// A file of a space.
    public struct StoredBlob: Sendable, Equatable, Codable {
        public let sha256: String
        public let size: Int64
        public let contentType: String
        public let objectID: UUID
        public let store: String

        /// The columns read (`storedColumns`), by name.
        enum CodingKeys: String, CodingKey, CaseIterable {
            case sha256, size
            case contentType = "content_type"
            case objectID = "object_id"
            case store
        }

        public init(sha256: String, size: Int64, contentType: String, objectID: UUID, store: String) {
            self.sha256 = sha256
            self.size = size
            self.contentType = contentType
            self.objectID = objectID
            self.store = store
        }
    }

    static let storedColumns = StoredBlob.CodingKeys.allCases.map(\.rawValue).joined(separator: ", ")

    /// A new object about to be written: it is garbage, due once `abandonAfter` seconds
    /// have passed, unless a finished upload makes it a file first.
    public func beginObject(sha256: String, store: String, abandonAfter seconds: Double) async throws -> UUID {
        let object = UUID()
        try await pool.execute("""
            INSERT INTO blob_garbage (object_id, sha256, store, not_before)
            VALUES (\(object), \(sha256), \(store), clock_timestamp() + make_interval(secs => \(seconds)))
            """)
        return object
    }

    public enum Finished: Sendable, Equatable {
        /// The space now holds the file (201).
        case created(StoredBlob)
        /// The space held it already (200); the new object is garbage.
        case existing(StoredBlob)
        /// The space's files would exceed the quota; the object is garbage.
        case overQuota(used: Int64)
        /// The space was deleted meanwhile.
        case spaceGone
        /// The uploader can no longer write to the space (removed, or made a viewer).
        case notWritable
        /// The object was removed as abandoned before it was finished.
        case abandoned
    }

    /// Makes a written, sealed object the space's file `sha256` — unless `user` can no
    /// longer write to the space, the space holds it already, or it would take the space
    /// over `quota` bytes (counting the other open uploads' declared lengths). Under the
    /// space's row lock, so two uploads into one space count against the quota one after
    /// the other. `upload`: the resumable upload this was, which ends here.
    public func finish(
        object: UUID, space: SpaceID, user: UserID, sha256: String, size: Int64, contentType: String, store: String, quota: Int64,
        upload: UUID? = nil
    ) async throws -> Finished {
        try await pool.transaction { connection in
            func discard() throws {
                try connection.execute("UPDATE blob_garbage SET not_before = clock_timestamp() WHERE object_id = \(object)")
            }
            // A finished upload stays until it expires, so that a client whose last answer
            // was lost learns that it is done; a refused one ends.
            func end(finished: Bool) throws {
                guard let upload else { return }
                if finished {
                    try connection.execute("UPDATE blob_uploads SET finished = true WHERE upload_id = \(upload)")
                } else {
                    try connection.execute("DELETE FROM blob_uploads WHERE upload_id = \(upload)")
                }
            }
            guard try !connection.execute("SELECT 1 FROM spaces WHERE space_id = \(space) FOR NO KEY UPDATE").isEmpty else {
                try discard()
                try end(finished: false)
                return .spaceGone
            }
            guard try Self.canWrite(connection, user: user, space: space) else {
                try discard()
                try end(finished: false)
                return .notWritable
            }
            if let existing = try Self.find(connection, space: space, sha256: sha256) {
                try discard()
                try end(finished: true)
                return .existing(existing)
            }
            let used = try Self.usage(connection, space: space, excluding: upload)
            if used + size > quota {
                try discard()
                try end(finished: false)
                return .overQuota(used: used)
            }
            guard try connection.execute("DELETE FROM blob_garbage WHERE object_id = \(object)").affectedRows == 1 else {
                try end(finished: false)
                return .abandoned
            }
            try connection.execute("""
                INSERT INTO blobs (space_id, sha256, object_id, store, size, content_type)
                VALUES (\(space), \(sha256), \(object), \(store), \(size), \(contentType))
                """)
            try end(finished: true)
            return .created(StoredBlob(sha256: sha256, size: size, contentType: contentType, objectID: object, store: store))
        }
    }

    /// The space's file with this hash.
    public func find(space: SpaceID, sha256: String) async throws -> StoredBlob? {
        try await pool.withConnection { try Self.find($0, space: space, sha256: sha256) }
    }

    static func find(_ connection: PGConnection, space: SpaceID, sha256: String) throws -> StoredBlob? {
        try connection.execute("""
            SELECT \(sql: storedColumns) FROM blobs WHERE space_id = \(space) AND sha256 = \(sha256)
            """).first?.decode(as: StoredBlob.self)
    }

    /// Bytes the space's files take, and its open uploads will.
    public func usage(space: SpaceID) async throws -> Int64 {
        try await pool.withConnection { try Self.usage($0, space: space, excluding: nil) }
    }

    /// The space's files' sizes and its open uploads' declared lengths (but `upload`'s).
    static func usage(_ connection: PGConnection, space: SpaceID, excluding upload: UUID?) throws -> Int64 {
        // No upload has the nil UUID.
        let excluded = upload ?? UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
        return try connection.execute("""
            SELECT ((SELECT coalesce(sum(size), 0) FROM blobs WHERE space_id = \(space))
                  + (SELECT coalesce(sum(length), 0) FROM blob_uploads
                     WHERE space_id = \(space) AND NOT finished AND expires_at > clock_timestamp() AND upload_id <> \(excluded)))::bigint
            """).first?.decode(Int64.self, at: 0) ?? 0
    }

    /// Whether `user` is a member of the space who may add to it.
    static func canWrite(_ connection: PGConnection, user: UserID, space: SpaceID) throws -> Bool {
        guard let role = try connection.execute("SELECT role FROM space_members WHERE space_id = \(space) AND user_id = \(user)")
            .first?.decode(String.self, at: 0)
        else { return false }
        return SpaceRole(rawValue: role)?.canWrite ?? false
    }

    /// A file that the public (or unlisted) record `publicID` references, from that
    /// record's space; nil once it is unpublished or deleted. (A published record holds
    /// data, so its `blob_refs` are what its data references.)
    public func publicBlob(publicID: String, sha256: String) async throws -> StoredBlob? {
        try await pool.execute("""
            SELECT \(sql: Self.storedColumns)
            FROM records r JOIN blobs b ON b.space_id = r.space_id AND b.sha256 = \(sha256)
            WHERE r.public_id = \(publicID) AND r.visibility <> \(literal: RecordState.PublicVisibility.private)
              AND \(sha256) = ANY(r.blob_refs)
            """).first?.decode(as: StoredBlob.self)
    }

    // MARK: - Resumable uploads

    public struct Upload: Sendable, Equatable, Codable {
        public let uploadID: UUID
        public let userID: UserID
        public let spaceID: SpaceID
        public let sha256: String
        public let contentType: String
        public let length: Int64
        public let received: Int64
        public let finished: Bool
        public let store: String

        /// The columns read (`uploadColumns`), by name.
        enum CodingKeys: String, CodingKey, CaseIterable {
            case uploadID = "upload_id"
            case userID = "user_id"
            case spaceID = "space_id"
            case sha256
            case contentType = "content_type"
            case length, received, finished, store
        }
    }

    static let uploadColumns = Upload.CodingKeys.allCases.map(\.rawValue).joined(separator: ", ")

    public enum CreatedUpload: Sendable, Equatable {
        case created(Upload)
        case spaceGone
        /// The space's files and open uploads would exceed the quota with this one.
        case overQuota
        /// The user has `openUploadsPerUser` open already.
        case tooManyOpen
    }

    /// A resumable upload; its object is garbage once it expires or ends unfinished. Its
    /// declared length counts against the space's quota while it is open, under the
    /// space's row lock; a user has at most `maxOpen` open at once.
    public func createUpload(
        user: UserID, space: SpaceID, sha256: String, contentType: String, length: Int64, store: String, expiresIn seconds: Double,
        quota: Int64, maxOpen: Int
    ) async throws -> CreatedUpload {
        let id = UUID()
        return try await pool.transaction { connection in
            guard try !connection.execute("SELECT 1 FROM spaces WHERE space_id = \(space) FOR NO KEY UPDATE").isEmpty else {
                return .spaceGone
            }
            if try Self.usage(connection, space: space, excluding: nil) + length > quota { return .overQuota }
            let open = try connection.execute("""
                SELECT count(*) FROM blob_uploads WHERE user_id = \(user) AND NOT finished AND expires_at > clock_timestamp()
                """).first?.decode(Int64.self, at: 0) ?? 0
            if open >= maxOpen { return .tooManyOpen }
            try connection.execute("""
                INSERT INTO blob_garbage (object_id, sha256, store, not_before)
                VALUES (\(id), \(sha256), \(store), clock_timestamp() + make_interval(secs => \(seconds)))
                """)
            let upload = try connection.execute("""
                INSERT INTO blob_uploads (upload_id, user_id, space_id, sha256, content_type, length, store, expires_at)
                SELECT \(id), \(user), space_id, \(sha256), \(contentType), \(length), \(store),
                       clock_timestamp() + make_interval(secs => \(seconds))
                FROM spaces WHERE space_id = \(space)
                RETURNING \(sql: Self.uploadColumns)
                """).first?.decode(as: Upload.self)
            return upload.map { CreatedUpload.created($0) } ?? .spaceGone
        }
    }

    /// The user's upload, while it has not expired.
    public func upload(id: String, user: UserID) async throws -> Upload? {
        guard let uploadID = UUID(uuidString: id) else { return nil }
        return try await pool.execute("""
            SELECT \(sql: Self.uploadColumns) FROM blob_uploads
            WHERE upload_id = \(uploadID) AND user_id = \(user) AND expires_at > clock_timestamp()
            """).first?.decode(as: Upload.self)
    }

    /// Moves the upload's offset from `from` to `to` and its expiry forward; false when
    /// another request moved it first, or it expired.
    public func advance(upload: UUID, from: Int64, to: Int64, expiresIn seconds: Double) async throws -> Bool {
        try await pool.transaction { connection in
            let moved = try connection.execute("""
                UPDATE blob_uploads SET received = \(to), expires_at = clock_timestamp() + make_interval(secs => \(seconds))
                WHERE upload_id = \(upload) AND received = \(from) AND expires_at > clock_timestamp()
                """).affectedRows == 1
            if moved {
                try connection.execute("""
                    UPDATE blob_garbage SET not_before = clock_timestamp() + make_interval(secs => \(seconds))
                    WHERE object_id = \(upload)
                    """)
            }
            return moved
        }
    }

    /// Ends an upload unfinished (tus termination); its object is garbage at once.
    public func endUpload(_ upload: UUID) async throws {
        try await pool.execute("DELETE FROM blob_uploads WHERE upload_id = \(upload)")
    }

    // MARK: - Removal

    /// Objects in these stores due for removal.
    public func dueGarbage(stores: [String], limit: Int) async throws -> [(object: UUID, sha256: String, store: String)] {
        try await pool.execute("""
            SELECT object_id, sha256, store FROM blob_garbage
            WHERE not_before <= clock_timestamp() AND store = ANY(\(stores))
            ORDER BY not_before LIMIT \(limit)
            """).map { try $0.decode((UUID, String, String).self) }
    }

    /// Forgets a removed object, unless it became due again later (then it stays queued).
    public func forgetGarbage(_ object: UUID) async throws {
        try await pool.execute("DELETE FROM blob_garbage WHERE object_id = \(object) AND not_before <= clock_timestamp()")
    }

    /// Forgets an object removed because it will never be a file (a refused upload).
    public func forgetDiscarded(_ object: UUID) async throws {
        try await pool.execute("DELETE FROM blob_garbage WHERE object_id = \(object)")
    }

    /// Ends uploads past their expiry; their objects become garbage.
    public func expireUploads() async throws -> Int {
        try await pool.execute("DELETE FROM blob_uploads WHERE expires_at <= clock_timestamp()").affectedRows
    }

    /// Bytes of all objects stored, each counted once.
    public func storedBytes() async throws -> Int64 {
        try await pool.execute("""
            SELECT coalesce(sum(size), 0)::bigint FROM (SELECT DISTINCT ON (object_id) size FROM blobs ORDER BY object_id) o
            """).first?.decode(Int64.self, at: 0) ?? 0
    }

    // MARK: - Operators

    public struct Listed: Sendable, Codable, Equatable {
        public let sha256: String
        public let size: Int64
        public let contentType: String
        public let objectID: UUID
        public let store: String
        public let refCount: Int
        public let createdAt: String

        /// The columns read, by name.
        enum CodingKeys: String, CodingKey {
            case sha256, size
            case contentType = "content_type"
            case objectID = "object_id"
            case store
            case refCount = "ref_count"
            case createdAt = "created_at"
        }

        /// The file as the stores know it.
        public var blob: StoredBlob {
            StoredBlob(sha256: sha256, size: size, contentType: contentType, objectID: objectID, store: store)
        }
    }

    /// A space's files, by hash.
    public func list(space: SpaceID) async throws -> [Listed] {
        try await pool.execute("""
            SELECT sha256, size, content_type, object_id, store, ref_count, syncline_rfc3339(created_at) AS created_at
            FROM blobs WHERE space_id = \(space) ORDER BY sha256
            """).map { try $0.decode(as: Listed.self) }
    }

    /// Objects in a store (of one space's files, when given), one per object (a fork's file
    /// shares its source's), in object order after `after`.
    public func objects(
        in store: String, space: SpaceID? = nil, after: UUID?, limit: Int
    ) async throws -> [(object: UUID, sha256: String, size: Int64)] {
        try await pool.execute("""
            SELECT DISTINCT ON (object_id) object_id, sha256, size FROM blobs
            WHERE store = \(store) AND (\(space)::uuid IS NULL OR space_id = \(space))
              AND object_id > \(after ?? UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)))
            ORDER BY object_id LIMIT \(limit)
            """).map { try $0.decode((UUID, String, Int64).self) }
    }

    /// Points every file of `object` at `copy`, an object written to `store` (begun with
    /// `beginObject`); the old object becomes garbage. False when the files are gone.
    public func move(object: UUID, to copy: UUID, in store: String) async throws -> Bool {
        try await pool.transaction { connection in
            guard let (sha256, old) = try connection.execute("""
                SELECT sha256, store FROM blobs WHERE object_id = \(object) FOR UPDATE
                """).first?.decode((String, String).self) else { return false }
            try connection.execute("UPDATE blobs SET object_id = \(copy), store = \(store) WHERE object_id = \(object)")
            try connection.execute("DELETE FROM blob_garbage WHERE object_id = \(copy)")
            try connection.execute("""
                INSERT INTO blob_garbage (object_id, sha256, store, not_before)
                VALUES (\(object), \(sha256), \(old), clock_timestamp())
                ON CONFLICT (object_id) DO UPDATE SET not_before = EXCLUDED.not_before
                """)
            return true
        }
    }
}
