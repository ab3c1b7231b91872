import Foundation
import PQBridge
import SyncModels

/// Spaces and their members. A request that names no space uses the caller's personal
/// space, made on first use.
public struct SpaceStore: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    /// The user's personal space, made (with the user as owner) when missing.
    public func personalSpace(user: String) async throws -> String {
        try await pool.withConnection { try Self.personalSpace($0, user: user) }
    }

    static func personalSpace(_ connection: PGConnection, user: String) throws -> String {
        for _ in 0..<2 {
            if let row = try connection.query("""
                WITH existing AS (SELECT space_id FROM spaces WHERE personal_of = $1),
                created AS (
                  INSERT INTO spaces (space_id, name, personal_of)
                  SELECT $2::uuid, 'Personal', $1 WHERE NOT EXISTS (SELECT 1 FROM existing)
                  ON CONFLICT (personal_of) DO NOTHING
                  RETURNING space_id),
                member AS (INSERT INTO space_members (space_id, user_id, role) SELECT space_id, $1, 'owner' FROM created)
                SELECT space_id FROM existing UNION ALL SELECT space_id FROM created
                """, [user, UUID().uuidString.lowercased()]).first {
                return try row.string("space_id")
            }
            // Another request made it at the same moment: the second look finds it.
        }
        throw PGError(code: .decoding, message: "personal space of a user could not be made")
    }

    /// SQL for the personal space of the user bound as `parameter` (nil until it exists).
    static func personalSpaceSQL(_ parameter: String) -> String {
        "(SELECT space_id FROM spaces WHERE personal_of = \(parameter))"
    }
}
