import PQBridge
import SyncModels

/// Service tokens (`service_tokens`): the app's backend's way in. Only a token's SHA-256 is
/// stored (`encode(sha256(convert_to(token, 'UTF8')), 'hex')`); creating and revoking one is
/// in the audit log, and so is every request made with it.
public struct ServiceTokenStore: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    private static let columns = """
        token_id, name, spaces::text[], read_only, created_by, syncline_rfc3339(created_at), syncline_rfc3339(revoked_at)
        """

    private static func view(_ row: PGRows.Row) throws -> ServiceTokenView {
        let (id, name, spaces, readOnly, createdBy, createdAt, revokedAt) =
            try row.decode((String, String, [String]?, Bool, String, String, String?).self)
        return ServiceTokenView(
            tokenID: id, name: name, spaces: spaces, readOnly: readOnly, createdBy: createdBy, createdAt: createdAt,
            revokedAt: revokedAt)
    }

    /// Stores `token` (the caller draws it at random, with `ServicePrincipal.tokenPrefix`)
    /// under `name`; `spaces` nil: every space. The spaces must exist: nil when one does not.
    public func create(
        token: String, name: String, spaces: [SpaceID]?, readOnly: Bool, actor: String
    ) async throws -> ServiceTokenView? {
        try await pool.transaction { connection in
            if let spaces, !(try SpaceStore.allExist(connection, spaces)) { return nil }
            guard let row = try connection.execute("""
                INSERT INTO service_tokens (token_id, name, token_hash, spaces, read_only, created_by)
                VALUES (\(ServiceTokenID.random()), \(name), encode(sha256(convert_to(\(token), 'UTF8')), 'hex'),
                        \(spaces.map { Array(Set($0)).sorted() }), \(readOnly), \(actor))
                RETURNING \(sql: Self.columns)
                """).first else { throw UnexpectedAnswer("the service token was not stored") }
            let view = try Self.view(row)
            try connection.execute("""
                INSERT INTO admin_audit (actor, action, target, count) VALUES (\(actor), 'service_token_create', \(view.tokenID), 1)
                """)
            return view
        }
    }

    /// Every token, revoked ones too, newest first.
    public func list() async throws -> [ServiceTokenView] {
        try await pool.execute("SELECT \(sql: Self.columns) FROM service_tokens ORDER BY created_at DESC, token_id")
            .map(Self.view)
    }

    /// Revokes a token: refused from the next request on, and its jobs not yet applied
    /// have their ops rejected (`forbidden`) as a removed member's are. False when unknown.
    public func revoke(id: ServiceTokenID, actor: String) async throws -> Bool {
        try await pool.transaction { connection in
            let revoked = try connection.execute("""
                UPDATE service_tokens SET revoked_at = coalesce(revoked_at, clock_timestamp()) WHERE token_id = \(id) RETURNING 1
                """).count > 0
            if revoked {
                try connection.execute("""
                    INSERT INTO admin_audit (actor, action, target, count) VALUES (\(actor), 'service_token_revoke', \(id.description), 1)
                    """)
            }
            return revoked
        }
    }

    /// The service `token` names, when it is known and not revoked, with the request
    /// (`use`, e.g. `GET /v1/service/…`) written to the audit log in the same statement.
    public func authenticate(token: String, use: String) async throws -> ServicePrincipal? {
        guard let row = try await pool.execute("""
            WITH t AS (
              SELECT token_id, name, spaces, read_only FROM service_tokens
              WHERE token_hash = encode(sha256(convert_to(\(token), 'UTF8')), 'hex') AND revoked_at IS NULL),
            used AS (
              INSERT INTO admin_audit (actor, action, target, count)
              SELECT \(ServicePrincipal.userPrefix) || t.token_id, 'service_request', \(use), 1 FROM t)
            SELECT token_id, name, spaces, read_only FROM t
            """).first else { return nil }
        let (id, name, spaces, readOnly) = try row.decode((ServiceTokenID, String, [SpaceID]?, Bool).self)
        return ServicePrincipal(id: id, name: name, spaces: spaces.map(Set.init), readOnly: readOnly)
    }
}
