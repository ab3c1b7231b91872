import GRDB
import SyncModels

/// Queries over the records as the device shows them, and the app's declared indexes.
extension LocalStore {
    /// The query's records, in its order.
    func records(_ query: RecordQuery) throws -> [LocalRecord] {
        let (sql, arguments) = try QuerySQL.select(query)
        return try database.read { db in try Self.rows(db, sql: sql, arguments: arguments).map(Self.record) }
    }

    /// How many records the query's filter keeps.
    func count(_ query: RecordQuery) throws -> Int {
        let (sql, arguments) = try QuerySQL.count(query)
        return try database.read { db in try Int.fetchOne(db.cachedStatement(sql: sql), arguments: arguments) ?? 0 }
    }

    /// Whether any of the records `ids` (as shown now) passes the query's filter.
    func anyMatches(_ query: RecordQuery, ids: Set<String>) throws -> Bool {
        let (sql, arguments) = try QuerySQL.anyMatches(query, ids: Array(ids))
        return try database.read { db in try Bool.fetchOne(db, sql: sql, arguments: arguments) ?? false }
    }

    /// Creates the declared indexes that are missing and drops the ones no longer declared.
    static func declare(_ db: Database, _ indexes: [LocalIndex]) throws {
        let wanted = try indexes.map(QuerySQL.createIndex)
        let names = Set(wanted.map(\.name))
        for existing in try Self.strings(db, sql: "SELECT name FROM sqlite_master WHERE type = 'index' AND name GLOB 'syncline_ix_*'")
        where !names.contains(existing) {
            try db.execute(sql: "DROP INDEX \(existing)")
        }
        for index in wanted { try db.execute(sql: index.sql) }
    }
}
