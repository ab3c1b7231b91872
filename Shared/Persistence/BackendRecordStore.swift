import PQBridge
import SyncModels

/// Records as the app's backend reads them: a data query over one collection of a space,
/// and (for the record feed and exports) the changes of a space after a version.
public struct BackendRecordStore: Sendable {
    let reads: ReadPools

    public init(reads: ReadPools) { self.reads = reads }

    public init(pool: PGPool) { self.init(reads: ReadPools(primary: pool)) }

    /// The columns of a `BackendRecord`, from table alias `r`, in its order.
    static let columns = """
        r.space_id, r.collection, r.record_id, r.version, r.deleted, CASE WHEN r.deleted THEN NULL ELSE r.data END,
        syncline_rfc3339(r.updated_at), r.changed_by, r.changed_job
        """

    /// The number of columns `columns` selects.
    static let columnCount = 9

    /// The record `columns` selected, starting at column `first`.
    static func record(_ row: PGRows.Row, from first: Int = 0) throws -> BackendRecord {
        let space = try row.decode(String.self, at: first), collection = try row.decode(String.self, at: first + 1)
        let id = try row.decode(String.self, at: first + 2), version = try row.decode(Int64.self, at: first + 3)
        let deleted = try row.decode(Bool.self, at: first + 4), data = try row.decode(PGJSON?.self, at: first + 5)
        let updatedAt = try row.decode(String.self, at: first + 6), changedBy = try row.decode(String?.self, at: first + 7)
        let job = try row.decode(String?.self, at: first + 8)
        return BackendRecord(
            spaceID: space, collection: collection, id: id, version: version, deleted: deleted,
            data: try data.map { try JSONParser.parse($0.text) }, updatedAt: updatedAt, changedBy: changedBy, jobID: job)
    }

    /// A record that a publish alone reached holds no data and is not a record to readers
    /// (over `records r`): what pulls, queries, feeds and exports leave out.
    public static let holdsData = "(r.write_clock IS NOT NULL OR r.delete_clock IS NOT NULL)"

    /// One page of `query` over the space's records, in its order then by id. Values are
    /// compared as JSON: an order or range comparison holds only between values of one
    /// type; a missing field is null.
    /// `idOrder`: how ids are ordered after the query's fields — in bytes (the data API's
    /// documented order), or as the primary key holds them (`.index`: a page without an
    /// order reads the key's range, however large the collection).
    public func query(space: SpaceID, _ query: DataQuery, idOrder: IDOrder = .bytes) async throws -> BackendRecordPage {
        let statement = Self.queryStatement(space: space, query, idOrder: idOrder)
        let rows = try await reads.read { pool in try await pool.execute(statement) }
        let records = try rows.prefix(query.limit).map { try Self.record($0) }
        var next: String?
        if rows.count > query.limit, let last = rows.prefix(query.limit).last, let record = records.last {
            var values: [JSONValue] = []
            for index in query.order.indices {
                values.append(try JSONParser.parse(try last.decode(PGJSON.self, at: Self.columnCount + index).text))
            }
            next = DataQuery.cursor(after: values + [.string(record.id)])
        }
        return BackendRecordPage(records: records, nextCursor: next)
    }

    public enum IDOrder: String, Sendable {
        case bytes = #"COLLATE "C""#
        case index = ""
    }

    /// The statement of one page of `query`: the records' columns, then the order fields' values.
    public static func queryStatement(space: SpaceID, _ query: DataQuery, idOrder: IDOrder = .bytes) -> PGQuery {
        var binds = PGBinds()
        func field(_ name: String) -> String { "coalesce(r.data -> \(binds.append(name)), 'null'::jsonb)" }
        func json(_ value: JSONValue) -> String { "\(binds.append(PGJSON(JSONWriter.string(value))))::jsonb" }
        var conditions = [
            "r.space_id = \(binds.append(space))", "r.collection = \(binds.append(query.collection))", Self.holdsData,
        ]
        if !query.includeDeleted { conditions.append("NOT r.deleted") }
        for condition in query.conditions {
            let value = field(condition.field)
            switch condition.comparison {
            case .equal: conditions.append("\(value) = \(json(condition.value))")
            case .notEqual: conditions.append("\(value) <> \(json(condition.value))")
            case .less, .lessOrEqual, .greater, .greaterOrEqual:
                let operand = json(condition.value)
                conditions.append("(jsonb_typeof(\(value)) = jsonb_typeof(\(operand)) AND \(value) \(condition.comparison.rawValue) \(operand))")
            case .isIn: conditions.append("\(value) IN (SELECT jsonb_array_elements(\(json(condition.value))))")
            case .isNull: conditions.append("\(value) = 'null'::jsonb")
            case .contains:
                var any = "(jsonb_typeof(\(value)) = 'array' AND \(value) @> jsonb_build_array(\(json(condition.value))))"
                if let text = condition.value.stringValue {
                    any += " OR (jsonb_typeof(\(value)) = 'string' AND strpos(lower(\(value) #>> '{}'), lower(\(binds.append(text)))) > 0)"
                }
                conditions.append("(\(any))")
            }
        }
        let keys = query.order.map { (sql: field($0.field), descending: $0.descending) }
        if let after = query.after {
            // Past the cursor in the order: the first key that differs decides.
            var alternatives: [String] = []
            for index in 0...keys.count {
                var parts = (0..<index).map { "\(keys[$0].sql) = \(json(after[$0]))" }
                if index < keys.count {
                    parts.append("\(keys[index].sql) \(keys[index].descending ? "<" : ">") \(json(after[index]))")
                } else {
                    parts.append("r.record_id \(idOrder.rawValue) > \(binds.append(after[index].stringValue ?? ""))")
                }
                alternatives.append("(" + parts.joined(separator: " AND ") + ")")
            }
            conditions.append("(" + alternatives.joined(separator: " OR ") + ")")
        }
        let ordering = (keys.map { "\($0.sql) \($0.descending ? "DESC" : "ASC")" } + ["r.record_id \(idOrder.rawValue)"]).joined(separator: ", ")
        let orderValues = keys.isEmpty ? "" : ", " + keys.map(\.sql).joined(separator: ", ")
        let sql = """
            SELECT \(Self.columns)\(orderValues) FROM records r
            WHERE \(conditions.joined(separator: " AND "))
            ORDER BY \(ordering) LIMIT \(binds.append(query.limit + 1))
            """
        return PGQuery(unsafeSQL: sql, binds: binds)
    }
}
