import GRDB
import SyncModels

/// A `RecordQuery` as SQL over the `records` table. A field is `json_extract(data, '$."a"."b"')`
/// — the same text in a query and in a declared index, which is how SQLite matches the two.
/// Paths are checked and written into the SQL; every value is bound.
enum QuerySQL {
    static let base = "FROM records WHERE collection = ? AND data IS NOT NULL"

    /// `SELECT <columns>` of the query's records, in its order, limit and offset.
    static func select(_ query: RecordQuery, columns: String = "*") throws -> (sql: String, arguments: StatementArguments) {
        var (sql, arguments) = try filtered(query, columns: columns)
        // Ties go by id. With a filter, `+id` keeps SQLite from walking the primary key for
        // that order instead of using an index on the filtered fields (without statistics
        // it would: a collection's rows in id order need no sort).
        let tieBreak = query.filter == nil ? "id ASC" : "+id ASC"
        let keys = try query.order.map { "\(try expression($0.field)) \($0.descending ? "DESC" : "ASC")" } + [tieBreak]
        sql += " ORDER BY " + keys.joined(separator: ", ")
        if query.limit != nil || query.offset > 0 {
            sql += " LIMIT ? OFFSET ?"
            _ = arguments.append(contentsOf: [query.limit ?? -1, query.offset])
        }
        return (sql, arguments)
    }

    /// `SELECT count(*)` of the records the filter keeps (order, limit and offset aside).
    static func count(_ query: RecordQuery) throws -> (sql: String, arguments: StatementArguments) {
        try filtered(query, columns: "count(*)")
    }

    /// `SELECT <columns>` of the collection's shown records the filter keeps.
    static func filtered(_ query: RecordQuery, columns: String) throws -> (sql: String, arguments: StatementArguments) {
        var sql = "SELECT \(columns) \(base)"
        var arguments: StatementArguments = [query.collection]
        if let filter = query.filter { sql += " AND " + (try condition(filter, &arguments)) }
        return (sql, arguments)
    }

    /// Whether any of the records `ids` passes the query's filter.
    static func anyMatches(_ query: RecordQuery, ids: [String]) throws -> (sql: String, arguments: StatementArguments) {
        var arguments: StatementArguments = [query.collection]
        var sql = "SELECT EXISTS (SELECT 1 \(base) AND id IN (\(placeholders(ids.count)))"
        _ = arguments.append(contentsOf: StatementArguments(ids))
        if let filter = query.filter { sql += " AND " + (try condition(filter, &arguments)) }
        return (sql + ")", arguments)
    }

    /// The statement creating a declared index, and its name.
    static func createIndex(_ index: LocalIndex) throws -> (name: String, sql: String) {
        // Partial on `data IS NOT NULL`, a term of every query: a count is answered from the
        // index alone, without visiting the rows.
        let definition = "ON records (collection, \(try index.fields.map(expression).joined(separator: ", "))) WHERE data IS NOT NULL"
        // Named by its definition, so a changed definition is a new index (and the old one
        // dropped), and the same fields declared for two collections are one index.
        let name = "syncline_ix_" + String(fnv1a(definition), radix: 16)
        return (name, "CREATE INDEX IF NOT EXISTS \(name) \(definition)")
    }

    static func expression(_ field: Field) throws -> String {
        if field.isRecordID { return "id" }
        return "json_extract(data, '\(try path(field))')"
    }

    /// `$."a"."b"` for `a.b`: each segment quoted, so any name the server accepts works.
    static func path(_ field: Field) throws -> String {
        let segments = field.name.split(separator: ".", omittingEmptySubsequences: false)
        for segment in segments where segment.isEmpty || segment.contains(where: { $0 == "\"" || $0 == "\\" || $0 == "'" || $0.isNewline || $0.asciiValue.map { $0 < 0x20 } == true }) {
            throw ClientError.invalidQuery(detail: "field '\(field.name)': a name segment is empty or holds a quote, backslash or control character")
        }
        return "$" + segments.map { ".\"\($0)\"" }.joined()
    }

    static func condition(_ filter: Filter, _ arguments: inout StatementArguments) throws -> String {
        switch filter {
        case .compare(let field, let comparison, let value):
            if value == .null { throw ClientError.invalidQuery(detail: "field '\(field)': compare with null using isNull") }
            _ = arguments.append(contentsOf: [bound(value)])
            return "\(try expression(field)) \(comparison.rawValue) ?"
        case .isIn(let field, let values):
            let expression = try expression(field)
            let present = values.filter { $0 != .null }
            var terms: [String] = []
            if !present.isEmpty {
                _ = arguments.append(contentsOf: StatementArguments(present.map(bound)))
                terms.append("\(expression) IN (\(placeholders(present.count)))")
            }
            if present.count < values.count { terms.append("\(expression) IS NULL") }
            return terms.isEmpty ? "0" : "(" + terms.joined(separator: " OR ") + ")"
        case .contains(let field, let value):
            if field.isRecordID {
                guard case .string(let text) = value else { return "0" }
                _ = arguments.append(contentsOf: [Self.folded(text)])
                return "instr(\(fold)(id), ?) > 0"
            }
            let path = try path(field)
            var branches = ""
            if case .string(let text) = value {
                _ = arguments.append(contentsOf: [Self.folded(text)])
                branches += " WHEN 'text' THEN instr(\(fold)(json_extract(data, '\(path)')), ?) > 0"
            }
            _ = arguments.append(contentsOf: [bound(value)])
            branches += " WHEN 'array' THEN EXISTS (SELECT 1 FROM json_each(data, '\(path)') WHERE value = ?)"
            return "(CASE json_type(data, '\(path)')\(branches) ELSE 0 END)"
        case .hasPrefix(let field, let prefix):
            _ = arguments.append(contentsOf: [Self.folded(prefix)])
            if field.isRecordID { return "instr(\(fold)(id), ?) = 1" }
            let path = try path(field)
            return "(json_type(data, '\(path)') = 'text' AND instr(\(fold)(json_extract(data, '\(path)')), ?) = 1)"
        case .isNull(let field):
            return "\(try expression(field)) IS NULL"
        case .and(let filters):
            guard !filters.isEmpty else { return "1" }
            return "(" + (try filters.map { try condition($0, &arguments) }).joined(separator: " AND ") + ")"
        case .or(let filters):
            guard !filters.isEmpty else { return "0" }
            return "(" + (try filters.map { try condition($0, &arguments) }).joined(separator: " OR ") + ")"
        case .not(let inner):
            // A comparison with a missing field is unknown in SQL; here it is false, so its
            // negation is true.
            return "NOT coalesce(\(try condition(inner, &arguments)), 0)"
        }
    }

    /// The SQL function folding text's case for `contains` and `hasPrefix` (SQLite's own
    /// `lower` folds ASCII only), registered on every connection of the store.
    static let fold = "syncline_fold"
    static let foldFunction = DatabaseFunction(fold, argumentCount: 1, pure: true) { values in
        String.fromDatabaseValue(values[0]).map(folded)
    }

    /// Text with its case folded, as queries compare it: Unicode's lowercase mapping (what
    /// JavaScript's `toLowerCase()` does).
    static func folded(_ text: String) -> String { text.lowercased() }

    /// A JSON value as SQLite holds what `json_extract` returns for it, in a record as the
    /// store shows it.
    static func bound(_ value: JSONValue) -> DatabaseValue {
        switch value {
        case .null: return .null
        case .bool(let flag): return (flag ? 1 : 0).databaseValue
        case .int(let number): return number.databaseValue
        case .double(let number): return number.databaseValue
        // A date-time as the store shows them (`LocalMerge.datesInUTC`): compared by time.
        case .string: return LocalMerge.datesInUTC(value).stringValue?.databaseValue ?? .null
        case .array, .object: return JSONWriter.string(LocalMerge.datesInUTC(value)).databaseValue
        }
    }

    static func placeholders(_ count: Int) -> String {
        Array(repeating: "?", count: count).joined(separator: ", ")
    }

    /// A stable 64-bit FNV-1a hash: index names that do not change between launches.
    static func fnv1a(_ text: String) -> UInt64 {
        text.utf8.reduce(14_695_981_039_346_656_037) { ($0 ^ UInt64($1)) &* 1_099_511_628_211 }
    }
}
