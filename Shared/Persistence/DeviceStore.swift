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

    /// A device's webhook: where to POST and the secret to sign with.
    public struct Webhook: Sendable, Equatable, Decodable {
        public let deviceID: String
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
