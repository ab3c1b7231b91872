import Foundation
import PQBridge
import SyncModels

/// The versions of the app's rules document (`rules`): each applied document is a new
/// version, the highest is current, none is ever rewritten.
public struct RulesStore: Sendable {
    let pool: PGPool

    public init(pool: PGPool) { self.pool = pool }

    /// The current version's number (0 before any document): what a process polls.
    public func currentVersion() async throws -> Int64 {
        try await pool.execute("SELECT coalesce(max(version), 0) FROM rules").first?.decode(Int64.self, at: 0) ?? 0
    }

    /// The current rules, compiled; `Rules.none` before any document. A stored document
    /// that no longer compiles (written by a newer release) is an error, never ignored.
    public func current() async throws -> Rules {
        try await pool.withConnection { try Self.current($0) }
    }

    /// The current rules as `connection` sees them (inside a transaction: under its snapshot).
    static func current(_ connection: PGConnection) throws -> Rules {
        guard let row = try connection.execute("SELECT version, document FROM rules ORDER BY version DESC LIMIT 1").first else {
            return .none
        }
        let (version, document) = try row.decode((Int64, PGJSON).self)
        do {
            return try Rules.compile(try JSONParser.parse(document.text), version: version)
        } catch {
            throw UnexpectedAnswer("stored rules version \(version) does not compile: \(error)")
        }
    }

    /// Stores `rules` (compiled, so checked) as the next version; returns its number.
    /// Versions are numbered under a lock, so two operators applying at once get two.
    public func save(_ rules: Rules, appliedBy actor: String) async throws -> Int64 {
        try await pool.transaction { connection in
            try connection.execute("SELECT pg_advisory_xact_lock(hashtextextended('syncline.rules', 0))")
            let row = try connection.execute("""
                INSERT INTO rules (version, document, applied_by)
                SELECT coalesce(max(version), 0) + 1, \(PGJSON(JSONWriter.string(rules.document))), \(actor) FROM rules
                RETURNING version
                """).first
            guard let version = try row?.decode(Int64.self, at: 0) else { throw UnexpectedAnswer("the rules insert returned no version") }
            try connection.execute("""
                INSERT INTO admin_audit (actor, action, target, count) VALUES (\(actor), 'rules_apply', \("version \(version)"), 1)
                """)
            return version
        }
    }

    /// The versions, newest first.
    public func history(limit: Int) async throws -> [RulesVersion] {
        try await pool.execute("""
            SELECT version, applied_by, syncline_rfc3339(applied_at), document FROM rules ORDER BY version DESC LIMIT \(limit)
            """).map { row in
            let (version, actor, at, document) = try row.decode((Int64, String, String, PGJSON).self)
            return RulesVersion(version: version, appliedBy: actor, appliedAt: at, collections: try Self.collectionNames(document.text))
        }
    }

    private static func collectionNames(_ document: String) throws -> [String] {
        (try JSONParser.parse(document).objectValue?["collections"]?.objectValue?.keys.sorted()) ?? []
    }
}
