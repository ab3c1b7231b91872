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

    static let columns = """
        device_id, name, platform, push_url, syncline_rfc3339(created_at) AS created_at,
        syncline_rfc3339(revoked_at) AS revoked_at
        """

    static func view(_ row: PGRow, secret: String? = nil) throws -> DeviceView {
        DeviceView(
            deviceID: try row.string("device_id"), name: try row.string("name"),
            platform: try row.string("platform"), pushURL: row["push_url"], pushSecret: secret,
            createdAt: try row.string("created_at"), revokedAt: row["revoked_at"])
    }

    public func register(user: String, name: String, platform: String, pushURL: String?, pushSecret: String) async throws -> DeviceView {
        let row = try await pool.query("""
            INSERT INTO devices (device_id, user_id, name, platform, push_url, push_secret)
            VALUES ($1, $2, $3, $4, $5, $6) RETURNING \(Self.columns)
            """, [UUID(), user, name, platform, pushURL, pushSecret]).first
        guard let row else { throw PGError(code: .decoding, message: "INSERT returned no row") }
        return try Self.view(row, secret: pushSecret)
    }

    public func list(user: String) async throws -> [DeviceView] {
        try await pool.query(
            "SELECT \(Self.columns) FROM devices WHERE user_id = $1 ORDER BY created_at, device_id", [user]
        ).rows.map { try Self.view($0) }
    }

    /// Revokes the device; false when it is unknown or foreign. Revoking twice is fine.
    public func revoke(user: String, deviceID: String) async throws -> Bool {
        guard let id = Names.canonicalUUID(deviceID) else { return false }
        let result = try await pool.query("""
            UPDATE devices SET revoked_at = coalesce(revoked_at, now())
            WHERE device_id = $1 AND user_id = $2
            """, [id, user])
        return result.affectedRows == 1
    }

    public func state(user: String, deviceID: String) async throws -> DeviceState {
        guard let id = Names.canonicalUUID(deviceID) else { return .notFound }
        let row = try await pool.query(
            "SELECT revoked_at IS NOT NULL AS revoked FROM devices WHERE device_id = $1 AND user_id = $2",
            [id, user]
        ).first
        guard let row else { return .notFound }
        return try row.bool("revoked") ? .revoked : .active
    }

    /// A stream connection counts as being seen, like a push: a device that only listens
    /// is not purged as unused.
    public func markSeen(deviceIDs: [String]) async throws {
        guard !deviceIDs.isEmpty else { return }
        try await pool.query("UPDATE devices SET last_seen_at = now() WHERE device_id = ANY($1::uuid[])", [deviceIDs])
    }

    /// A device's webhook: where to POST and the secret to sign with.
    public struct Webhook: Sendable, Equatable {
        public let deviceID: String
        public let url: String
        public let secret: String
    }

    /// The webhooks of a user's active devices.
    public func webhooks(user: String) async throws -> [Webhook] {
        try await pool.query("""
            SELECT device_id, push_url, push_secret FROM devices
            WHERE user_id = $1 AND push_url IS NOT NULL AND revoked_at IS NULL
            ORDER BY device_id
            """, [user]).rows.map {
            Webhook(deviceID: try $0.string("device_id"), url: try $0.string("push_url"), secret: try $0.string("push_secret"))
        }
    }

    /// One device's webhook, if it still has one and is not revoked.
    public func webhook(user: String, deviceID: String) async throws -> Webhook? {
        try await pool.query("""
            SELECT device_id, push_url, push_secret FROM devices
            WHERE user_id = $1 AND device_id = $2::uuid AND push_url IS NOT NULL AND revoked_at IS NULL
            """, [user, deviceID]).first.map {
            Webhook(deviceID: try $0.string("device_id"), url: try $0.string("push_url"), secret: try $0.string("push_secret"))
        }
    }
}
