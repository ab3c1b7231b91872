/// Rows sent as one array parameter per column, which `unnest` turns back into rows in a
/// statement. Each column is named once, beside its values, so a statement's column list,
/// its parameters and the alias that reads them cannot drift apart:
///
///     var rows = PGUnnest()
///     rows.column("job_id", ids)
///     rows.column("user_id", users)
///     let query: PGQuery = "INSERT INTO jobs (\(sql: rows.names)) SELECT \(sql: rows.names) FROM \(rows, as: "x")"
public struct PGUnnest: Sendable {
    public private(set) var columns: [String] = []
    var parameters: [PGParameter] = []

    public init() {}

    /// A column: its name, and its values in row order (`cast` for an array PostgreSQL
    /// cannot type from the parameter alone, such as `::uuid[]`).
    public mutating func column(_ name: String, _ values: some PGEncodable, cast: String = "") {
        column(name, PGParameter(values, cast: cast))
    }

    /// A column whose values' type is known only at run time.
    public mutating func column(_ name: String, _ values: PGParameter) {
        columns.append(name)
        parameters.append(values)
    }

    /// The columns' names, separated by commas.
    public var names: String { columns.joined(separator: ", ") }
}

extension PGQuery.StringInterpolation {
    /// `unnest($1, $2, …) AS alias(column, …)`: the rows, under `alias`, with their columns' names.
    public mutating func appendInterpolation(_ rows: PGUnnest, as alias: String) {
        appendLiteral("unnest(")
        appendInterpolation(list: rows.parameters)
        appendLiteral(") AS \(alias)(\(rows.names))")
    }
}
