import Foundation
import GRDB
import SyncModels
@testable import SynclineClient
import Testing
import TestSupport

/// Local queries: every operator against SQLite, declared indexes, and a property test
/// holding the SQL to a plain in-memory reading of the same rules.
@Suite("Local queries")
struct QueryTests {
    static func store(_ records: [String: [String: JSONValue]], indexes: [LocalIndex] = [], path: String? = nil) throws -> LocalStore {
        let path = path ?? NSTemporaryDirectory() + "query-\(UUID().uuidString).sqlite"
        let store = try LocalStore(path: path, indexes: indexes)
        for (id, data) in records.sorted(by: { $0.key < $1.key }) {
            _ = try store.enqueue(
                Op(opID: UUID().uuidString.lowercased(), type: .upsert, collection: "recipes", id: id, data: data),
                device: "node", now: Date())
        }
        return store
    }

    static let recipes: [String: [String: JSONValue]] = [
        "r1": ["title": "Pancakes", "minutes": 20, "tags": ["sweet", "quick"], "vegan": false, "rating": 4.5],
        "r2": ["title": "Salad", "minutes": 10, "tags": ["vegan", "quick"], "vegan": true],
        "r3": ["title": "Stew", "minutes": 120, "tags": [], "vegan": true, "rating": .null, "source": ["book": "Joy", "page": 12]],
        "r4": ["title": "pasta", "minutes": 25.5, "tags": ["quick"], "vegan": false, "rating": 3],
        "r5": ["title": "Quick bread", "minutes": "about an hour"],
    ]

    static func ids(_ store: LocalStore, _ filter: Filter?, order: [Ordering] = [], limit: Int? = nil, offset: Int = 0) throws -> [String] {
        try store.records(RecordQuery("recipes", where: filter, orderBy: order, limit: limit, offset: offset)).map(\.id)
    }

    @Test func everyOperatorSelectsWhatItSays() throws {
        let store = try Self.store(Self.recipes)
        let minutes = Field("minutes"), title = Field("title"), tags = Field("tags"), vegan = Field("vegan"), rating = Field("rating")
        #expect(try Self.ids(store, minutes == 20) == ["r1"])
        #expect(try Self.ids(store, minutes != 20) == ["r2", "r3", "r4", "r5"], "a string is not 20")
        #expect(try Self.ids(store, minutes < 25) == ["r1", "r2"])
        #expect(try Self.ids(store, minutes <= 25.5) == ["r1", "r2", "r4"], "integers and doubles compare as numbers")
        #expect(try Self.ids(store, minutes > 25) == ["r3", "r4", "r5"], "strings sort after numbers")
        #expect(try Self.ids(store, minutes >= 120) == ["r3", "r5"])
        #expect(try Self.ids(store, title.isIn(["Salad", "Stew", "Nothing"])) == ["r2", "r3"])
        #expect(try Self.ids(store, rating.isIn([3, .null])) == ["r2", "r3", "r4", "r5"], "null in a list matches missing and null")
        #expect(try Self.ids(store, title.isIn([])) == [])
        #expect(try Self.ids(store, title.contains("a")) == ["r1", "r2", "r4", "r5"], "substring")
        #expect(try Self.ids(store, title.contains("P")) == ["r1", "r4"], "whatever the case")
        #expect(try Self.ids(store, title.contains("BRE")) == ["r5"])
        #expect(try Self.ids(store, title.hasPrefix("pa")) == ["r1", "r4"], "a prefix, whatever the case")
        #expect(try Self.ids(store, title.hasPrefix("cakes")) == [])
        #expect(try Self.ids(store, tags.hasPrefix("qu")) == [], "an array has no prefix")
        #expect(try Self.ids(store, Field.id.hasPrefix("R")) == ["r1", "r2", "r3", "r4", "r5"])
        #expect(try Self.ids(store, tags.contains("quick")) == ["r1", "r2", "r4"], "array element")
        #expect(try Self.ids(store, tags.contains("qui")) == [], "an array holds elements, not substrings")
        #expect(try Self.ids(store, vegan == true) == ["r2", "r3"])
        #expect(try Self.ids(store, vegan == false) == ["r1", "r4"])
        #expect(try Self.ids(store, rating.isNull) == ["r2", "r3", "r5"], "missing or null")
        #expect(try Self.ids(store, rating == .null) == ["r2", "r3", "r5"])
        #expect(try Self.ids(store, rating != .null) == ["r1", "r4"])
        #expect(try Self.ids(store, Field("source.book") == "Joy") == ["r3"], "nested field")
        #expect(try Self.ids(store, Field("source.page") > 10) == ["r3"])
        #expect(try Self.ids(store, vegan == true && minutes < 60) == ["r2"])
        #expect(try Self.ids(store, vegan == true || rating > 4) == ["r1", "r2", "r3"])
        #expect(try Self.ids(store, !(rating > 4)) == ["r2", "r3", "r4", "r5"], "not of a comparison with a missing field is true")
        #expect(try Self.ids(store, !(vegan == true) && !tags.contains("sweet")) == ["r4", "r5"])
        #expect(try Self.ids(store, Field.id.isIn(["r1", "r5"])) == ["r1", "r5"])
        #expect(try Self.ids(store, Field.id > "r3") == ["r4", "r5"])
        #expect(try Self.ids(store, .and([])) == ["r1", "r2", "r3", "r4", "r5"])
        #expect(try Self.ids(store, .or([])) == [])
    }

    /// A backend writing `datetime.isoformat()` and a device writing UTC: the same instants
    /// compare and order by time, not as text.
    @Test func datesWithAnOffsetCompareAndOrderByTime() throws {
        let store = try Self.store([
            "a": ["at": "2026-11-22T10:00:00+01:00"],        // 09:00:00.000 UTC
            "b": ["at": "2026-11-22T09:30:00Z"],
            "c": ["at": "2026-11-22T08:00:00-00:30"],        // 08:30 UTC
            "d": ["at": "2026-11-22T09:15:00.123456+00:00", "log": ["2026-11-22T10:00:00+01:00", "not a date"]],
            "e": ["at": "soon", "note": "2026-11-22T10:00 is not a date-time, just text"],
        ])
        let nine = try #require(RFC3339.date(from: "2026-11-22T09:00:00Z"))
        let at = Field("at")
        #expect(try Self.ids(store, at == nine) == ["a"], "10:00+01:00 is 09:00 UTC")
        #expect(try Self.ids(store, at > nine && at < "2026-11-22T11:00:00+01:00") == ["b", "d"], "a bound with an offset too")
        #expect(try Self.ids(store, at < nine) == ["c"])
        #expect(try Self.ids(store, !at.isNull, order: [at.ascending]) == ["c", "a", "d", "b", "e"])
        #expect(try Self.ids(store, Field("log").contains("2026-11-22T09:00:00Z")) == ["d"], "inside an array too")
        let shown = try #require(try store.record("recipes", "d"))
        #expect(shown.data["at"] == "2026-11-22T09:15:00.123Z", "shown in UTC with milliseconds")
        #expect(shown.data["log"] == ["2026-11-22T09:00:00.000Z", "not a date"])
        #expect(try store.record("recipes", "e")?.data["note"] == "2026-11-22T10:00 is not a date-time, just text")
    }

    @Test func orderLimitOffsetAndCount() throws {
        let store = try Self.store(Self.recipes)
        #expect(try Self.ids(store, nil, order: [Field("minutes").ascending]) == ["r2", "r1", "r4", "r3", "r5"])
        #expect(try Self.ids(store, nil, order: [Field("minutes").descending]) == ["r5", "r3", "r4", "r1", "r2"])
        #expect(try Self.ids(store, nil, order: [Field("rating").ascending]) == ["r2", "r3", "r5", "r4", "r1"], "missing and null first, then by id")
        #expect(try Self.ids(store, nil, order: [Field("vegan").descending, Field("title").ascending]) == ["r2", "r3", "r1", "r4", "r5"])
        #expect(try Self.ids(store, nil, order: [Field("title").ascending]) == ["r1", "r5", "r2", "r3", "r4"], "by UTF-8 bytes: lowercase last")
        #expect(try Self.ids(store, nil, order: [Field("minutes").ascending], limit: 2, offset: 1) == ["r1", "r4"])
        #expect(try Self.ids(store, nil, offset: 3) == ["r4", "r5"])
        #expect(try store.count(RecordQuery("recipes", where: Field("tags").contains("quick"))) == 3)
        #expect(try store.count(RecordQuery("recipes")) == 5)
        #expect(try store.count(RecordQuery("other")) == 0)
    }

    @Test func deletedRecordsAndOtherCollectionsAreNeverSelected() throws {
        let store = try Self.store(Self.recipes)
        _ = try store.enqueue(Op(opID: UUID().uuidString.lowercased(), type: .delete, collection: "recipes", id: "r1"), device: "node", now: Date())
        _ = try store.enqueue(
            Op(opID: UUID().uuidString.lowercased(), type: .upsert, collection: "notes", id: "n1", data: ["minutes": 20]),
            device: "node", now: Date())
        #expect(try Self.ids(store, Field("minutes") == 20) == [])
        #expect(try Self.ids(store, nil) == ["r2", "r3", "r4", "r5"])
    }

    @Test func aFieldNoPathCanReachIsRefused() throws {
        let store = try Self.store([:])
        for name in ["", "a..b", "it's", "say \"hi\"", "back\\slash", "line\nbreak"] {
            #expect(throws: ClientError.self) { try store.records(RecordQuery("recipes", where: Field(name) == 1)) }
        }
        #expect(throws: ClientError.self) { try store.records(RecordQuery("recipes", orderBy: [Field("a.").ascending])) }
        // Names the server accepts but SQL would not as bare words work.
        #expect(try store.records(RecordQuery("recipes", where: Field("select from") == 1 || Field("ünï") == 2)).isEmpty)
    }

    @Test func declaredIndexesAreUsedAndUndeclaredOnesDropped() throws {
        let path = NSTemporaryDirectory() + "query-\(UUID().uuidString).sqlite"
        let indexes = [LocalIndex("recipes", on: "minutes"), LocalIndex("recipes", on: "vegan", "title"), LocalIndex("recipes", on: "title")]
        let store = try Self.store(Self.recipes, indexes: indexes, path: path)
        func plan(_ query: RecordQuery, in target: LocalStore) throws -> String {
            let (sql, arguments) = try QuerySQL.select(query)
            return try target.database.read { db in
                try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + sql, arguments: arguments).map { $0["detail"] as String }.joined(separator: "; ")
            }
        }
        #expect(try plan(RecordQuery("recipes", where: Field("minutes") < 30), in: store).contains("syncline_ix_"))
        #expect(try plan(RecordQuery("recipes", where: Field("title") == "Stew"), in: store).contains("syncline_ix_"), "not the primary key for the order by id")
        #expect(try plan(RecordQuery("recipes", where: Field("vegan") == true, orderBy: [Field("title").ascending]), in: store).contains(try QuerySQL.createIndex(indexes[1]).name))
        #expect(try Self.ids(store, Field("minutes") < 30) == ["r1", "r2", "r4"], "the index gives the same answer")
        func names(_ store: LocalStore) throws -> Set<String> {
            Set(try store.database.read { try String.fetchAll($0, sql: "SELECT name FROM sqlite_master WHERE name GLOB 'syncline_ix_*'") })
        }
        #expect(try names(store).count == 3)
        let reopened = try LocalStore(path: path, indexes: [indexes[0]])
        #expect(try names(reopened).count == 1)
        #expect(try plan(RecordQuery("recipes", where: Field("vegan") == true), in: reopened).contains(try QuerySQL.createIndex(indexes[1]).name) == false)
    }

    // MARK: - Property: the SQL agrees with a plain reading of the rules

    @Test(arguments: [1, 2, 3])
    func randomQueriesAgreeWithAPlainInMemoryFilter(seed: UInt64) throws {
        var random = SplitMix64(state: seed)
        var records: [String: [String: JSONValue]] = [:]
        for n in 0..<120 { records[String(format: "r%03d", n)] = Self.randomData(&random) }
        let store = try Self.store(records, indexes: seed == 2 ? [LocalIndex("recipes", on: "a"), LocalIndex("recipes", on: "b", "a")] : [])
        for round in 0..<300 {
            let query = RecordQuery(
                "recipes", where: random.next() % 8 == 0 ? nil : Self.randomFilter(&random, depth: 3),
                orderBy: (0..<Int(random.next() % 3)).map { _ in
                    let field = Field(["a", "b", "c", "d", "n.x"][Int(random.next() % 5)])
                    return random.next() % 2 == 0 ? field.ascending : field.descending
                },
                limit: random.next() % 3 == 0 ? Int(random.next() % 30) : nil, offset: random.next() % 4 == 0 ? Int(random.next() % 20) : 0)
            let expected = PlainQuery.run(query, over: records)
            let actual = try store.records(query).map(\.id)
            #expect(actual == expected, "seed \(seed) round \(round): \(query)")
            if actual != expected { return }
            #expect(try store.count(query) == PlainQuery.run(RecordQuery("recipes", where: query.filter), over: records).count)
        }
    }

    static func randomValue(_ random: inout SplitMix64) -> JSONValue? {
        switch random.next() % 9 {
        case 0: return nil
        case 1: return .null
        case 2, 3: return .int(Int64(random.next() % 6))
        case 4: return .double(Double(random.next() % 12) / 2)
        case 5: return .bool(random.next() % 2 == 0)
        default: return .string(["", "a", "ab", "b", "B", "ba", "abc", "c"][Int(random.next() % 8)])
        }
    }

    static func randomData(_ random: inout SplitMix64) -> [String: JSONValue] {
        var data: [String: JSONValue] = [:]
        for field in ["a", "b", "d"] { data[field] = randomValue(&random) }
        if random.next() % 4 != 0 {
            data["c"] = .array((0..<Int(random.next() % 4)).compactMap { _ in randomValue(&random) })
        } else {
            data["c"] = randomValue(&random)
        }
        if random.next() % 2 == 0 { data["n"] = ["x": randomValue(&random) ?? .null] }
        return data
    }

    static func randomFilter(_ random: inout SplitMix64, depth: Int) -> Filter {
        let field = Field(["a", "b", "c", "d", "n.x", "missing"][Int(random.next() % 6)])
        let value = randomValue(&random) ?? 1
        let leaf = random.next() % 10
        if depth > 0 && leaf >= 7 {
            let parts = (0..<Int(random.next() % 3) + 1).map { _ in randomFilter(&random, depth: depth - 1) }
            switch leaf {
            case 7: return .and(parts)
            case 8: return .or(parts)
            default: return .not(parts[0])
            }
        }
        switch leaf % 7 {
        case 0: return value == .null ? field.isNull : .compare(field, [.equal, .notEqual][Int(random.next() % 2)], value)
        case 1: return value == .null ? field.isNull : .compare(field, [.less, .lessOrEqual, .greater, .greaterOrEqual][Int(random.next() % 4)], value)
        case 2: return field.isIn((0..<Int(random.next() % 4)).map { _ in randomValue(&random) ?? .null })
        case 3: return field.contains(value == .null ? "a" : value)
        case 4: return field.hasPrefix(value.stringValue ?? "b")
        case 5: return field.isNull
        default: return Field.id.isIn([.string(String(format: "r%03d", random.next() % 120))])
        }
    }
}

/// The query rules read plainly, over in-memory records: what SQLite is asked to do.
enum PlainQuery {
    /// A value as SQLite holds what `json_extract` gives: no value, a number, or text
    /// (arrays and objects as their JSON text).
    enum Value {
        case number(Double)
        case text([UInt8])

        init?(_ json: JSONValue?) {
            switch json {
            case nil, .null?: return nil
            case .bool(let flag)?: self = .number(flag ? 1 : 0)
            case .int(let number)?: self = .number(Double(number))
            case .double(let number)?: self = .number(number)
            case .string(let text)?: self = .text(Array(text.utf8))
            case let other?: self = .text(Array(JSONWriter.string(other).utf8))
            }
        }

        static func order(_ lhs: Value?, _ rhs: Value?) -> Int {
            switch (lhs, rhs) {
            case (nil, nil): return 0
            case (nil, _): return -1
            case (_, nil): return 1
            case (.number(let a)?, .number(let b)?): return a < b ? -1 : a > b ? 1 : 0
            case (.number?, .text?): return -1
            case (.text?, .number?): return 1
            case (.text(let a)?, .text(let b)?): return a.lexicographicallyPrecedes(b) ? -1 : a == b ? 0 : 1
            }
        }
    }

    static func raw(_ field: Field, id: String, _ data: [String: JSONValue]) -> JSONValue? {
        if field.isRecordID { return .string(id) }
        var current: JSONValue? = .object(data)
        for segment in field.name.split(separator: ".") { current = current?.objectValue?[String(segment)] }
        return current
    }

    static func matches(_ filter: Filter, id: String, _ data: [String: JSONValue]) -> Bool {
        switch filter {
        case .compare(let field, let comparison, let value):
            guard let left = Value(raw(field, id: id, data)), let right = Value(value) else { return false }
            let order = Value.order(left, right)
            switch comparison {
            case .equal: return order == 0
            case .notEqual: return order != 0
            case .less: return order < 0
            case .lessOrEqual: return order <= 0
            case .greater: return order > 0
            case .greaterOrEqual: return order >= 0
            }
        case .isIn(let field, let values):
            let value = Value(raw(field, id: id, data))
            return values.contains { candidate in
                guard let right = Value(candidate) else { return value == nil }
                return value != nil && Value.order(value, right) == 0
            }
        case .contains(let field, let needle):
            switch raw(field, id: id, data) {
            case .string(let text)?:
                guard case .string(let part) = needle else { return false }
                let (haystack, needle) = (Array(text.lowercased().utf8), Array(part.lowercased().utf8))
                return needle.isEmpty || haystack.count >= needle.count && (0...(haystack.count - needle.count)).contains {
                    haystack[$0..<($0 + needle.count)].elementsEqual(needle)
                }
            case .array(let items)?:
                guard let right = Value(needle) else { return false }
                return items.contains { Value($0).map { Value.order($0, right) == 0 } ?? false }
            default:
                return false
            }
        case .hasPrefix(let field, let prefix):
            guard case .string(let text)? = raw(field, id: id, data) else { return false }
            return text.lowercased().utf8.starts(with: prefix.lowercased().utf8)
        case .isNull(let field):
            return Value(raw(field, id: id, data)) == nil
        case .and(let filters): return filters.allSatisfy { matches($0, id: id, data) }
        case .or(let filters): return filters.contains { matches($0, id: id, data) }
        case .not(let inner): return !matches(inner, id: id, data)
        }
    }

    static func run(_ query: RecordQuery, over records: [String: [String: JSONValue]]) -> [String] {
        let kept = records.filter { record in query.filter.map { matches($0, id: record.key, record.value) } ?? true }
        let sorted = kept.sorted { lhs, rhs in
            for key in query.order {
                let order = Value.order(Value(raw(key.field, id: lhs.key, lhs.value)), Value(raw(key.field, id: rhs.key, rhs.value)))
                if order != 0 { return key.descending ? order > 0 : order < 0 }
            }
            return lhs.key < rhs.key
        }.map(\.key)
        return Array(sorted.dropFirst(query.offset).prefix(query.limit ?? Int.max))
    }
}

/// Filters take Swift values as they are (no `.int(Int64(x))`), dates included, and mean
/// exactly what the same `JSONValue`s mean.
@Suite("Query values")
struct QueryValueTests {
    @Test func swiftValuesBuildTheSameFiltersAsJSONValues() {
        let minutes = 30, rating: Double = 4.5, title = "Soup", vegan = true, missing: Int? = nil
        #expect((Field("minutes") <= minutes) == .compare(Field("minutes"), .lessOrEqual, .int(30)))
        #expect((Field("rating") > rating) == .compare(Field("rating"), .greater, .double(4.5)))
        #expect((Field("title") == title) == .compare(Field("title"), .equal, .string("Soup")))
        #expect((Field("vegan") != vegan) == .compare(Field("vegan"), .notEqual, .bool(true)))
        #expect((Field("rating") == missing) == .isNull(Field("rating")), "nil is null")
        #expect(Field("tags").contains(title) == .contains(Field("tags"), .string("Soup")))
        #expect(Field("minutes").isIn([10, 20].map { $0 * 2 }) == .isIn(Field("minutes"), [.int(20), .int(40)]))
        let cooked = Date(timeIntervalSince1970: 1_795_338_000.123)
        #expect((Field("cookedAt") >= cooked) == .compare(Field("cookedAt"), .greaterOrEqual, .string("2026-11-22T09:00:00.123Z")))
        // Literals and .null still read as before.
        #expect((Field("minutes") < 30) == .compare(Field("minutes"), .less, .int(30)))
        #expect((Field("rating") == .null) == .isNull(Field("rating")))
        #expect(Field("rating").isIn([3, .null]) == .isIn(Field("rating"), [.int(3), .null]))
    }
}

/// Fields named by a record type's own `CodingKeys`: the same filters as by name, `.id` the
/// record's id. (A misspelling does not compile; a record coded by hand offers no keys.)
@Suite("Typed query fields")
struct TypedFieldTests {
    struct Source: Codable, Sendable {
        enum CodingKeys: String, CodingKey { case book, page }
        var book: String
        var page: Int
    }

    struct Recipe: SyncRecord {
        static let collection = "recipes"
        enum CodingKeys: String, CodingKey { case id, title, minutes, source }
        var id: String
        var title: String
        var minutes: Double
        var source: Source?
    }

    /// Coded by hand, without a `CodingKeys` type: `field(_:)` has no key to take.
    struct Note: SyncRecord {
        static let collection = "notes"
        var id: String
        init(from decoder: any Decoder) throws { id = try decoder.singleValueContainer().decode(String.self) }
        func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            try container.encode(id)
        }
    }

    @Test func theRecordsKeysNameTheSameFieldsAsTheirNames() throws {
        #expect(Recipe.field(.minutes) == Field("minutes"))
        #expect(Recipe.field(.id) == Field.id, "the record's id, not a data field named id")
        #expect(Recipe.field(.source).appending(Source.CodingKeys.page) == Field("source.page"))
        #expect(LocalIndex(Recipe.self, on: .minutes, .title) == LocalIndex("recipes", on: "minutes", "title"))
        #expect(Note.CodingKeys.self == UndeclaredCodingKeys.self)

        let store = try QueryTests.store(QueryTests.recipes)
        #expect(try QueryTests.ids(store, Recipe.field(.minutes) <= 25.5, order: [Recipe.field(.title).descending]) == ["r4", "r2", "r1"])
        #expect(try QueryTests.ids(store, Recipe.field(.source).appending(Source.CodingKeys.book) == "Joy") == ["r3"])
        #expect(try QueryTests.ids(store, Recipe.field(.id).isIn(["r2", "r5"])) == ["r2", "r5"])
    }
}
