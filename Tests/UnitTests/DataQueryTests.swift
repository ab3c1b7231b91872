import Foundation
import SyncModels
import Testing

@Suite("The data API's queries")
struct DataQueryTests {
    static func refusal(_ json: JSONValue) -> DataQuery.Invalid? {
        do {
            _ = try DataQuery(json: json)
            return nil
        } catch {
            return error
        }
    }

    @Test func aQueryReadsItsFiltersOrderAndLimit() throws {
        let query = try DataQuery(json: [
            "collection": "recipes", "limit": 20, "include_deleted": true,
            "where": [["field": "minutes", "op": "<=", "value": 30], ["field": "tags", "op": "contains", "value": "veg"],
                      ["field": "kind", "op": "in", "value": ["main", "side"]], ["field": "photo", "op": "is_null"]],
            "order": [["field": "minutes", "direction": "desc"], ["field": "title"]],
        ])
        #expect(query.collection == "recipes" && query.limit == 20 && query.includeDeleted)
        #expect(query.conditions.map(\.comparison) == [.lessOrEqual, .contains, .isIn, .isNull])
        #expect(query.order.map(\.field) == ["minutes", "title"] && query.order.map(\.descending) == [true, false])
        #expect(query.after == nil)
        let defaults = try DataQuery(json: ["collection": "notes"])
        #expect(defaults.limit == 100 && defaults.conditions.isEmpty && defaults.order.isEmpty && !defaults.includeDeleted)
    }

    @Test func aCursorCarriesTheOrderValuesAndTheIdAndFitsOnlyItsQuery() throws {
        let cursor = DataQuery.cursor(after: [.int(25), .string("Soup"), .string("r/7")])
        let next = try DataQuery(json: [
            "collection": "recipes", "order": [["field": "minutes"], ["field": "title"]], "cursor": .string(cursor),
        ])
        #expect(next.after == [.int(25), .string("Soup"), .string("r/7")])
        // The same cursor under another order is refused, as is anything not made by a page.
        #expect(Self.refusal(["collection": "recipes", "cursor": .string(cursor)])?.pointer == "/cursor")
        #expect(Self.refusal(["collection": "recipes", "cursor": "not a cursor"])?.pointer == "/cursor")
        #expect(Self.refusal(["collection": "recipes", "cursor": .string(DataQuery.cursor(after: [.int(1)]))])?.pointer == "/cursor")
    }

    @Test func aWrongQueryIsRefusedWithThePointerOfItsFirstError() {
        let cases: [(JSONValue, String)] = [
            ([], ""),
            (["where": []], "/collection"),
            (["collection": "Bad Name"], "/collection"),
            (["collection": "a", "limit": 0], "/limit"),
            (["collection": "a", "limit": 1001], "/limit"),
            (["collection": "a", "limit": "10"], "/limit"),
            (["collection": "a", "include_deleted": "yes"], "/include_deleted"),
            (["collection": "a", "where": ["field": "x"]], "/where"),
            (["collection": "a", "where": [["field": "x", "op": "like", "value": 1]]], "/where/0/op"),
            (["collection": "a", "where": [["field": "", "op": "=", "value": 1]]], "/where/0/field"),
            (["collection": "a", "where": [["field": "x", "op": "="]]], "/where/0/value"),
            (["collection": "a", "where": [["field": "x", "op": "is_null", "value": 1]]], "/where/0/value"),
            (["collection": "a", "where": [["field": "x", "op": "in", "value": 1]]], "/where/0/value"),
            (["collection": "a", "where": [["field": "x", "op": "=", "value": .double(.nan)]]], "/where/0/value"),
            (["collection": "a", "where": [["field": "x", "op": "=", "value": "a\u{0}b"]]], "/where/0/value"),
            (["collection": "a", "where": [["field": "x", "op": "=", "value": 1, "extra": true]]], "/where/0"),
            (["collection": "a", "order": [["field": "x", "direction": "up"]]], "/order/0/direction"),
            (["collection": "a", "order": [["field": "x", "direction": [:]]]], "/order/0/direction"),
            (["collection": "a", "order": [["field": "a"], ["field": "b"], ["field": "c"], ["field": "d"]]], "/order"),
            (["collection": "a", "select": ["x"]], "/select"),
        ]
        for (json, pointer) in cases {
            #expect(Self.refusal(json)?.pointer == pointer, "\(json)")
        }
        let many = JSONValue.array((0...DataQuery.maxConditions).map { _ in ["field": "x", "op": "=", "value": 1] })
        #expect(Self.refusal(["collection": "a", "where": many])?.pointer == "/where")
    }

    @Test func aServiceIsNeverAMembersRoleAndWritesAsAnOwnerUnlessARightNamesIt() throws {
        #expect(throws: (any Error).self) { try JSONDecoder().decode(SpaceRole.self, from: Data(#""service""#.utf8)) }
        #expect(try JSONDecoder().decode(SpaceRole.self, from: Data(#""editor""#.utf8)) == .editor)
        let rules = try Rules.compile([
            "collections": ["products": ["write": ["delete": ["owner"], "upsert": ["editor"], "fields": ["price": ["service"]]]]],
        ], version: 1)
        func op(_ type: OpType, _ data: [String: JSONValue]? = nil) -> Op {
            Op(opID: UUID().uuidString.lowercased(), type: type, collection: "products", id: "p", data: data)
        }
        #expect(rules.screen(op(.delete), role: .service) == nil)
        #expect(rules.screen(op(.upsert, ["a": 1]), role: .service)?.rule == "products.write.upsert")
        let service = UserID("service:x"), owner = UserID("o")
        #expect(rules.judge(op(.patch, ["price": 3]), record: nil, role: .service, user: service) == nil)
        #expect(rules.judge(op(.patch, ["price": 3]), record: nil, role: .owner, user: owner)?.rule == "products.fields.price")
    }
}
