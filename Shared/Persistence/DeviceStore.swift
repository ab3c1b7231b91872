import Foundation
import PQBridge
import SyncModels

public enum DeviceState: Sendable, Equatable {
    case active
    case revoked
    case notFound
}

/// Devices of a user. Every query is scoped by user: a foreign id behaves as unknown.
public struct DeviceStore: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    /// The columns `view` reads, in its order.
    static let columns = """
        device_id, name, platform, push_url, syncline_rfc3339(created_at), syncline_rfc3339(revoked_at)
        """

    static func view(_ row: PGRows.Row, secret: String? = nil) throws -> DeviceView {
        let (id, name, platform, pushURL, createdAt, revokedAt) = try row.decode((String, String, String, String?, String, String?).self)
        return DeviceView(
            deviceID: id, name: name, platform: platform, pushURL: pushURL, pushSecret: secret,
            createdAt: createdAt, revokedAt: revokedAt)
    }

    public func register(user: UserID, name: String, platform: String, pushURL: String?, pushSecret: String) async throws -> DeviceView {
        let row = try await pool.execute("""
            INSERT INTO devices (device_id, user_id, name, platform, push_url, push_secret)
            VALUES (\(UUID()), \(user), \(name), \(platform), \(pushURL), \(pushSecret)) RETURNING \(sql: Self.columns)
            """).first
        guard let row else { throw UnexpectedAnswer("the device INSERT returned no row") }
        return try Self.view(row, secret: pushSecret)
    }

    public func list(user: UserID) async throws -> [DeviceView] {
        try await pool.execute(
            "SELECT \(sql: Self.columns) FROM devices WHERE user_id = \(user) ORDER BY created_at, device_id"
        ).map { try Self.view($0) }
    }

    /// Revokes the device; false when it is unknown or foreign. Revoking twice is fine.
    /// Under the user's clock row lock, which every push's intake takes to check its
    /// device: a push of this device in progress commits first, and every later one finds
    /// the device revoked.
    public func revoke(user: UserID, device id: DeviceID) async throws -> Bool {
        try await pool.transaction { connection in
            try Self.lockClock(connection, user: user)
            return try connection.execute("""
                UPDATE devices SET revoked_at = coalesce(revoked_at, now())
                WHERE device_id = \(id) AND user_id = \(user)
                """).affectedRows == 1
        }
    }

    /// Takes the user's clock row lock (making the row if missing), as a push's intake does.
    static func lockClock(_ connection: PGConnection, user: UserID) throws {
        try connection.execute("""
            INSERT INTO user_clocks (user_id, hlc_ms, hlc_counter) VALUES (\(user), 0, 0)
            ON CONFLICT (user_id) DO UPDATE SET user_id = EXCLUDED.user_id
            """)
    }

    public func state(user: UserID, device id: DeviceID) async throws -> DeviceState {
        let row = try await pool.execute(
            "SELECT revoked_at IS NOT NULL FROM devices WHERE device_id = \(id) AND user_id = \(user)"
        ).first
        guard let row else { return .notFound }
        return try row.decode(Bool.self, at: 0) ? .revoked : .active
    }

    /// A stream connection counts as being seen, like a push: a device that only listens
    /// is not purged as unused.
    public func markSeen(devices ids: [DeviceID]) async throws {
        guard !ids.isEmpty else { return }
        try await pool.execute("UPDATE devices SET last_seen_at = now() WHERE device_id = ANY(\(ids))")
    }

    /// Where a device's pull of a space reached (the space nil for the user's personal
    /// space), and the collections it asked for (nil for all).
    public struct PullMark: Sendable {
        public struct Key: Hashable, Sendable {
            let device: DeviceID
            let space: SpaceID?
        }

        public let device: DeviceID
        public let user: UserID
        public let space: SpaceID?
        public let cursor: Int64
        public let collections: [String]?

        public init(device: DeviceID, user: UserID, space: SpaceID?, cursor: Int64, collections: [String]?) {
            self.device = device
            self.user = user
            self.space = space
            self.cursor = cursor
            self.collections = collections
        }

        public var key: Key { Key(device: device, space: space) }
    }

    /// Writes pull marks of devices that are the pulling user's (others are passed over).
    public func recordPulls(_ marks: [PullMark]) async throws {
        var rows = PGUnnest()
        rows.column("device_id", marks.map(\.device))
        rows.column("user_id", marks.map(\.user))
        rows.column("space_id", marks.map(\.space), cast: "::uuid[]")
        rows.column("cursor", marks.map(\.cursor))
        rows.column("collections", marks.map { $0.collections?.joined(separator: ",") }, cast: "::text[]")
        try await pool.execute("""
            INSERT INTO device_cursors (device_id, space_id, cursor, collections, pulled_at)
            SELECT DISTINCT ON (d.device_id, coalesce(x.space_id, s.space_id))
                   d.device_id, coalesce(x.space_id, s.space_id), x.cursor, string_to_array(x.collections, ','), now()
            FROM \(rows, as: "x")
            JOIN devices d ON d.device_id = x.device_id AND d.user_id = x.user_id
            LEFT JOIN spaces s ON x.space_id IS NULL AND s.personal_of = x.user_id
            WHERE coalesce(x.space_id, s.space_id) IS NOT NULL
            ON CONFLICT (device_id, space_id) DO UPDATE
              SET cursor = EXCLUDED.cursor, collections = EXCLUDED.collections, pulled_at = EXCLUDED.pulled_at
            """)
    }

    /// Ops a device says it set aside (refused by the server, kept on the device): one row
    /// per op, a second report of one op replacing the first.
    public struct SetAsideReport: Sendable {
        public let opID: String
        public let space: SpaceID?
        public let collection: String?
        public let recordID: String?
        public let job: JobID?
        public let reason: String

        public init(opID: String, space: SpaceID?, collection: String?, recordID: String?, job: JobID?, reason: String) {
            self.opID = opID
            self.space = space
            self.collection = collection
            self.recordID = recordID
            self.job = job
            self.reason = reason
        }
    }

    /// Records a device's report; false when the device is not the user's or is revoked.
    public func recordSetAside(user: UserID, device: DeviceID, _ reports: [SetAsideReport]) async throws -> Bool {
        try await pool.transaction { connection in
            guard try connection.execute("""
                SELECT 1 FROM devices WHERE device_id = \(device) AND user_id = \(user) AND revoked_at IS NULL FOR SHARE
                """).first != nil
            else { return false }
            guard !reports.isEmpty else { return true }
            var rows = PGUnnest()
            rows.column("op_id", reports.map(\.opID), cast: "::uuid[]")
            rows.column("space_id", reports.map(\.space), cast: "::uuid[]")
            rows.column("collection", reports.map(\.collection), cast: "::text[]")
            rows.column("record_id", reports.map(\.recordID), cast: "::text[]")
            rows.column("job_id", reports.map(\.job), cast: "::uuid[]")
            rows.column("reason", reports.map(\.reason))
            try connection.execute("""
                INSERT INTO set_aside_reports (device_id, \(sql: rows.names))
                SELECT DISTINCT ON (x.op_id) \(device), \(sql: rows.columns.map { "x." + $0 }.joined(separator: ", "))
                FROM \(rows, as: "x")
                ON CONFLICT (device_id, op_id) DO UPDATE
                  SET space_id = EXCLUDED.space_id, collection = EXCLUDED.collection, record_id = EXCLUDED.record_id,
                      job_id = EXCLUDED.job_id, reason = EXCLUDED.reason, reported_at = now()
                """)
            return true
        }
    }

    /// A device's webhook: where to POST and the secret to sign with.
    public struct Webhook: Sendable, Equatable, Decodable {
        public let deviceID: DeviceID
        public let url: String
        public let secret: String
    }

    /// The webhooks of a user's active devices.
    public func webhooks(user: UserID) async throws -> [Webhook] {
        try await pool.execute("""
            SELECT device_id, push_url AS url, push_secret AS secret FROM devices
            WHERE user_id = \(user) AND push_url IS NOT NULL AND revoked_at IS NULL
            ORDER BY device_id
            """).map { try $0.decode(as: Webhook.self) }
    }

    /// One device's webhook, if it still has one and is not revoked.
    public func webhook(user: UserID, device id: DeviceID) async throws -> Webhook? {
        try await pool.execute("""
            SELECT device_id, push_url AS url, push_secret AS secret FROM devices
            WHERE user_id = \(user) AND device_id = \(id) AND push_url IS NOT NULL AND revoked_at IS NULL
            """).first.map { try $0.decode(as: Webhook.self) }
    }
}
