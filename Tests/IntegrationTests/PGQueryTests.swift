import Foundation
import PQBridge
import Testing

/// The typed query layer against a real PostgreSQL: each type goes in as a binary
/// parameter, PostgreSQL reads it as that type (checked with SQL on its side), and it comes
/// back in binary format as the same value.
@Suite("typed queries", .enabled(if: TestEnvironment.hasServers), .serialized, .timeLimit(.minutes(2)))
struct PGQueryTests {
    /// Sends `value`, has PostgreSQL say how it read it (`pg_typeof` and its text form), and
    /// reads it back.
    struct Seen: Equatable {
        let type: String
        let text: String?
        init(_ type: String, _ text: String?) { self.type = type; self.text = text }
    }

    func roundTrip<Value: PGCodable & Equatable>(_ value: Value, in pool: PGPool) async throws -> Seen {
        let rows = try await pool.execute("SELECT \(value) AS value, pg_typeof(\(value))::text, \(value)::text")
        let (back, type, text) = try rows[0].decode((Value, String, String?).self)
        #expect(back == value, "\(Value.self) \(value) came back as \(back)")
        return Seen(type, text)
    }

    func expectRoundTrip<Value: PGCodable & Equatable>(
        _ value: Value, in pool: PGPool, _ expected: Seen, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let seen = try await roundTrip(value, in: pool)
        #expect(seen == expected, sourceLocation: sourceLocation)
    }

    @Test func scalarsRoundTripAsTheirPostgreSQLTypes() async throws {
        try await withPool(size: 1) { pool in
            for value: Int64 in [0, 1, -1, .max, .min] {
                try await expectRoundTrip(value, in: pool, Seen("bigint", String(value)))
            }
            try await expectRoundTrip(42, in: pool, Seen("bigint", "42"))
            for value: Int32 in [0, .max, .min] {
                try await expectRoundTrip(value, in: pool, Seen("integer", String(value)))
            }
            try await expectRoundTrip(true, in: pool, Seen("boolean", "true"))
            try await expectRoundTrip(false, in: pool, Seen("boolean", "false"))
            try await expectRoundTrip(1.5, in: pool, Seen("double precision", "1.5"))
            for text in ["", "plain", "ünïcödé 🚣‍♀️ 中文", "quote ' and \" and \\ and {braces}, commas", String(repeating: "x", count: 100_000)] {
                try await expectRoundTrip(text, in: pool, Seen("text", text))
            }
            let id = UUID()
            try await expectRoundTrip(id, in: pool, Seen("uuid", id.uuidString.lowercased()))
            let bytes = Data([0, 1, 2, 255, 0])
            try await expectRoundTrip(bytes, in: pool, Seen("bytea", "\\x000102ff00"))
            try await expectRoundTrip(Data(), in: pool, Seen("bytea", "\\x"))
            let json = PGJSON(#"{"a": [1, 2.5, "x"], "b": null}"#)
            try await expectRoundTrip(json, in: pool, Seen("jsonb", json.text))
        }
    }

    @Test func timestampsAreExactToTheMicrosecondAcrossTheRange() async throws {
        try await withPool(size: 1) { pool in
            let cases: [(PGTimestamp, String)] = [
                (PGTimestamp(microsecondsSince2000: 0), "2000-01-01 00:00:00+00"),
                (PGTimestamp(microsecondsSince2000: 1), "2000-01-01 00:00:00.000001+00"),
                (PGTimestamp(microsecondsSince2000: -1), "1999-12-31 23:59:59.999999+00"),
                // PostgreSQL's own limits: 4713 BC and 294276 AD.
                (PGTimestamp(microsecondsSince2000: -211_813_488_000_000_000), "4714-11-24 00:00:00+00 BC"),
                (PGTimestamp(microsecondsSince2000: 9_223_371_331_199_999_999), "294276-12-31 23:59:59.999999+00"),
                (PGTimestamp(microsecondsSince2000: .max), "infinity"),
                (PGTimestamp(microsecondsSince2000: .min), "-infinity"),
            ]
            _ = try await pool.execute("SET TIME ZONE 'UTC'")
            for (value, text) in cases {
                try await expectRoundTrip(value, in: pool, Seen("timestamp with time zone", text))
            }
            // A Date goes in as what PostgreSQL's now() gives, to the microsecond.
            let now = Date(timeIntervalSince1970: 1_795_511_604.123456)
            let rows = try await pool.execute("SELECT \(now) = '2026-11-24 09:13:24.123456+00'::timestamptz, \(now)")
            let (equal, back) = try rows[0].decode((Bool, Date).self)
            #expect(equal)
            #expect(abs(back.timeIntervalSince(now)) < 1e-6)
        }
    }

    @Test func arraysRoundTripWithNullsAndEmpty() async throws {
        try await withPool(size: 1) { pool in
            try await expectRoundTrip(["a", "b,c", "{d}", "\"e\"", ""], in: pool, Seen("text[]", #"{a,"b,c","{d}","\"e\"",""}"#))
            try await expectRoundTrip([String](), in: pool, Seen("text[]", "{}"))
            try await expectRoundTrip(["a", nil, "c"] as [String?], in: pool, Seen("text[]", "{a,NULL,c}"))
            try await expectRoundTrip([Int64.min, 0, .max], in: pool, Seen("bigint[]", "{-9223372036854775808,0,9223372036854775807}"))
            try await expectRoundTrip([Int64](), in: pool, Seen("bigint[]", "{}"))
            let ids = [UUID(), UUID()]
            let seen = try await roundTrip(ids, in: pool)
            #expect(seen.type == "uuid[]")
            try await expectRoundTrip([UUID](), in: pool, Seen("uuid[]", "{}"))
            try await expectRoundTrip([true, false], in: pool, Seen("boolean[]", "{t,f}"))
            // Used as sets: = ANY and unnest see every element.
            let rows = try await pool.execute("SELECT count(*) FROM unnest(\(ids)) AS id WHERE id = ANY(\(ids))")
            #expect(try rows[0].decode(Int64.self, at: 0) == 2)
        }
    }

    @Test func nullsReadAsNilAndFailWhereNotOptional() async throws {
        try await withPool(size: 1) { pool in
            let none: String? = nil
            let rows = try await pool.execute("SELECT \(none) AS a, \(Int64?.none) AS b, NULL::uuid AS c, \(["x"]) AS d")
            let (a, b, c) = try rows[0].decode((String?, Int64?, UUID?).self)
            #expect(a == nil && b == nil && c == nil)
            #expect(rows[0].isNull(at: 0))
            #expect(throws: PGError.self) { try rows[0].decode(String.self, at: 0) }
            // A NULL element where the element type is not Optional fails too.
            let array = try await pool.execute("SELECT ARRAY['a', NULL]::text[]")
            #expect(throws: PGError.self) { try array[0].decode([String].self, at: 0) }
            #expect(try array[0].decode([String?].self, at: 0) == ["a", nil])
        }
    }

    @Test func textWithNULIsRefusedBeforeAnythingIsSent() async throws {
        try await withPool(size: 1) { pool in
            _ = try await pool.execute("CREATE TEMP TABLE nul_check (t text)")
            for text in ["a\u{0}b", "\u{0}"] {
                await #expect(throws: PGError.self) { try await pool.execute("INSERT INTO nul_check VALUES (\(text))") }
                await #expect(throws: PGError.self) { try await pool.execute("SELECT \([text, "ok"])::text[]") }
            }
            let rows = try await pool.execute("SELECT count(*) FROM nul_check")
            #expect(try rows[0].decode(Int64.self, at: 0) == 0)
        }
    }

    /// Enum values are parameters of their raw type, never SQL literals.
    @Test func rawRepresentableValuesAreBoundByTheirRawValue() async throws {
        enum Status: String { case queued, succeeded }
        try await withPool(size: 1) { pool in
            let rows = try await pool.execute("SELECT \(Status.succeeded) = 'succeeded', pg_typeof(\(Status.queued))::text")
            let (equal, type) = try rows[0].decode((Bool, String).self)
            #expect(equal && type == "text")
        }
    }

    struct Device: Decodable, Equatable {
        let id: UUID
        let name: String
        let revokedAt: Date?
        let count: Int
        let tags: [String]
    }

    @Test func rowsDecodeIntoDecodableStructsByColumnName() async throws {
        try await withPool(size: 1) { pool in
            let id = UUID()
            // Columns in another order than the properties, one named in snake case.
            let rows = try await pool.execute("""
                SELECT 'phone' AS name, \(id) AS id, ARRAY['a','b'] AS tags, 3::int4 AS count, NULL::timestamptz AS revoked_at
                UNION ALL
                SELECT 'laptop', \(id), '{}'::text[], 4::int8, '2026-01-01T00:00:00Z'::timestamptz
                """)
            let devices = try rows.map { try $0.decode(as: Device.self) }
            #expect(devices == [
                Device(id: id, name: "phone", revokedAt: nil, count: 3, tags: ["a", "b"]),
                Device(id: id, name: "laptop", revokedAt: Date(timeIntervalSince1970: 1_767_225_600), count: 4, tags: []),
            ])
            // An optional property without a column reads as nil.
            let lacking = try await pool.execute("SELECT \(id) AS id, 'n' AS name, 1 AS count, '{}'::text[] AS tags")
            #expect(try lacking[0].decode(as: Device.self).revokedAt == nil)
            // A required property without a column is an error naming it, and so is a column of another type.
            let unnamed = try await pool.execute("SELECT \(id), 'n', NULL::timestamptz, 1, '{}'::text[]")
            #expect(throws: PGError.self) { try unnamed[0].decode(as: Device.self) }
            let wrong = try await pool.execute("SELECT 'x'::text AS id, 'n' AS name, 1 AS count, '{}'::text[] AS tags")
            #expect(throws: PGError.self) { try wrong[0].decode(as: Device.self) }
        }
    }

    @Test func manyParametersAndStatementsBuiltInALoop() async throws {
        try await withPool(size: 1) { pool in
            var binds = PGBinds()
            let placeholders = (1...500).map { binds.append(Int64($0)) }
            let sql = "SELECT " + placeholders.joined(separator: " + ")
            let rows = try await pool.execute(PGQuery(unsafeSQL: sql, binds: binds))
            #expect(try rows[0].decode(Int64.self, at: 0) == 125_250)
            // The same text with other values runs the prepared statement again.
            for n: Int64 in 1...3 {
                let again = try await pool.execute("SELECT \(n) * 2")
                #expect(try again[0].decode(Int64.self, at: 0) == n * 2)
            }
        }
    }
}
