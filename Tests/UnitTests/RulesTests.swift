import Foundation
import Operations
import SyncModels
import Testing

@Suite("Rules: the document")
struct RulesDocumentTests {
    static let recipes: JSONValue = [
        "default": "allow",
        "collections": [
            "recipes": [
                "schema": [
                    "type": "object", "required": ["title"],
                    "properties": [
                        "title": ["type": "string", "maxLength": 20],
                        "minutes": ["type": "integer", "minimum": 0],
                        "kind": ["enum": ["main", "dessert"]],
                        "photo": ["type": "file", "contentTypes": ["image/*"], "maxSize": 1000],
                    ],
                ],
                "write": ["delete": ["owner", "author"], "publish": ["owner"], "fields": ["price": ["owner"]]],
                "immutable": ["kind"],
            ],
            "notes": ["schema": ["type": "object", "additionalProperties": false, "properties": ["text": ["type": "string"]]]],
        ],
    ]

    func refusal(_ document: JSONValue) -> RulesError? {
        do {
            _ = try Rules.compile(document, version: 1)
            return nil
        } catch {
            return error
        }
    }

    @Test func aWorkedExampleCompiles() throws {
        let rules = try Rules.compile(Self.recipes, version: 3)
        #expect(rules.version == 3)
        #expect(rules.refusesAnything)
        #expect(Set(rules.collections.keys) == ["recipes", "notes"])
    }

    @Test func noDocumentRefusesNothing() {
        #expect(!Rules.none.refusesAnything)
        #expect(Rules.none.versionedDocument == ["default": "allow", "collections": [:], "version": 0])
    }

    @Test func aDocumentReadBackWithItsVersionCompilesAgain() throws {
        let rules = try Rules.compile(Self.recipes, version: 3)
        let again = try Rules.compile(rules.versionedDocument, version: 4)
        #expect(again.document == rules.document)
    }

    @Test func aWrongTypeIsNamedByItsPath() {
        let error = refusal(["collections": ["recipes": ["schema": ["type": "object", "properties": ["title": ["maxLength": "20"]]]]]])
        #expect(error?.path == "/collections/recipes/schema/properties/title/maxLength")
    }

    @Test func anUnknownKeyIsNamedByItsPath() {
        #expect(refusal(["collections": ["recipes": ["shema": [:]]]])?.path == "/collections/recipes/shema")
        #expect(refusal(["defaults": "allow"])?.path == "/defaults")
        #expect(refusal(["collections": ["recipes": ["write": ["upsrt": ["owner"]]]]])?.path == "/collections/recipes/write/upsrt")
        #expect(refusal(["collections": ["recipes": ["schema": ["minLenght": 1]]]])?.path == "/collections/recipes/schema/minLenght")
    }

    @Test func aBadPatternIsRefused() {
        let error = refusal(["collections": ["recipes": ["schema": ["properties": ["code": ["type": "string", "pattern": "([a-z"]]]]]])
        #expect(error?.path == "/collections/recipes/schema/properties/code/pattern")
    }

    @Test func aSchemaThatCanNeverMatchIsRefused() {
        let bounds = refusal(["collections": ["r": ["schema": ["properties": ["n": ["minimum": 5, "maximum": 1]]]]]])
        #expect(bounds?.path == "/collections/r/schema/properties/n/minimum")
        #expect(bounds?.message.contains("never matches") == true)
        let lengths = refusal(["collections": ["r": ["schema": ["properties": ["s": ["minLength": 5, "maxLength": 1]]]]]])
        #expect(lengths?.path == "/collections/r/schema/properties/s/minLength")
        let enumeration = refusal(["collections": ["r": ["schema": ["properties": ["s": ["type": "string", "enum": [1, 2]]]]]]])
        #expect(enumeration?.path == "/collections/r/schema/properties/s/enum")
        let required = refusal(["collections": ["r": ["schema": ["required": ["title"], "additionalProperties": false]]]])
        #expect(required?.path == "/collections/r/schema/required/0")
        let notAnObject = refusal(["collections": ["r": ["schema": ["type": "string"]]]])
        #expect(notAnObject?.path == "/collections/r/schema/type")
        #expect(refusal(["collections": ["r": ["schema": ["type": []]]]])?.path == "/collections/r/schema/type")
    }

    @Test func aViewerNeverWrites() {
        let error = refusal(["collections": ["r": ["write": ["upsert": ["viewer"]]]]])
        #expect(error?.path == "/collections/r/write/upsert/0")
    }

    @Test func aBadCollectionNameOrDefaultIsRefused() {
        #expect(refusal(["collections": ["Recipes": [:]]])?.path == "/collections/Recipes")
        #expect(refusal(["default": "maybe"])?.path == "/default")
        #expect(refusal([1, 2])?.path == "")
    }

    @Test func yamlErrorsNameTheirLine() throws {
        let yaml = """
            default: deny
            collections:
              recipes:
                schema:
                  type: object
                  properties:
                    title:
                      type: string
                      maxLength: twenty
            """
        #expect(throws: RulesError(path: "/collections/recipes/schema/properties/title/maxLength", "maxLength must be a whole number, 0 or more", line: 9)) {
            try RulesBook.read(yaml, format: .yaml)
        }
    }

    @Test func yamlScalarsKeepTheirTypes() throws {
        let rules = try RulesBook.read("""
            collections:
              codes:
                schema:
                  properties:
                    code: {const: "123"}
                    count: {maximum: 2.5, minimum: 1}
                    flag: {enum: [true, null]}
            """, format: .yaml)
        let codes = try #require(rules.collections["codes"])
        let screen = { (data: [String: JSONValue]) in
            rules.screen(Op(opID: "1", type: .upsert, collection: "codes", id: "c", data: data), role: .owner)?.rule
        }
        #expect(screen(["code": "123"]) == nil)
        #expect(screen(["code": 123]) == "codes.schema")
        #expect(screen(["count": 2]) == nil)
        #expect(screen(["count": 3]) == "codes.schema")
        #expect(screen(["flag": .null]) == nil)
        #expect(screen(["flag": false]) == "codes.schema")
        #expect(codes.immutable.isEmpty)
    }

    @Test func jsonAndYamlReadTheSameDocument() throws {
        let json = try RulesBook.read(#"{"collections": {"r": {"write": {"delete": ["owner"]}, "immutable": ["kind"]}}}"#, format: .json)
        let yaml = try RulesBook.read("collections:\n  r:\n    write:\n      delete: [owner]\n    immutable: [kind]\n", format: .yaml)
        #expect(json.document == yaml.document)
    }

    /// The worked examples of docs/RULES.md are documents the server takes as written.
    @Test func theDocumentedExamplesCompile() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let page = try String(contentsOf: root.appendingPathComponent("docs/RULES.md"), encoding: .utf8)
        let blocks = page.components(separatedBy: "```yaml\n").dropFirst().map { $0.components(separatedBy: "```")[0] }
        #expect(blocks.count == 2, "the meal planner's and the sailing app's rules")
        for block in blocks {
            let rules = try RulesBook.read(block, format: .yaml)
            #expect(rules.refusesAnything)
        }
    }

    @Test func duplicateYamlKeysAreRefused() {
        #expect(throws: RulesError.self) { try RulesBook.read("default: allow\ndefault: deny\n", format: .yaml) }
    }
}

@Suite("Rules: screening and judging ops")
struct RulesJudgmentTests {
    let rules = try! Rules.compile(RulesDocumentTests.recipes, version: 1)
    let alice: UserID = "alice", bob: UserID = "bob"

    func op(_ type: OpType, _ data: [String: JSONValue]? = nil, collection: String = "recipes") -> Op {
        Op(opID: "00000000-0000-0000-0000-000000000001", type: type, collection: collection, id: "r1", data: data, hlc: "1")
    }

    func record(_ fields: [String: JSONValue], creator: UserID?) -> StoredRecord {
        var state = RecordState()
        state.apply(Op(opID: "00000000-0000-0000-0000-000000000000", type: .upsert, collection: "recipes", id: "r1", data: fields, hlc: "0"))
        return StoredRecord(key: RecordKey(collection: "recipes", id: "r1"), version: 1, state: state, creator: creator)
    }

    @Test func anUpsertMustMatchTheWholeSchema() {
        #expect(rules.screen(op(.upsert, ["title": "Soup"]), role: .editor) == nil)
        let missing = rules.screen(op(.upsert, ["minutes": 3]), role: .editor)
        #expect(missing?.rule == "recipes.schema")
        #expect(missing?.pointer == "/data/title")
        let long = rules.screen(op(.upsert, ["title": "A title far longer than twenty"]), role: .editor)
        #expect(long?.pointer == "/data/title")
        #expect(rules.screen(op(.upsert, ["title": "Soup", "minutes": 1.5]), role: .editor)?.pointer == "/data/minutes")
        #expect(rules.screen(op(.upsert, ["title": "Soup", "minutes": 2.0]), role: .editor) == nil)
        #expect(rules.screen(op(.upsert, ["title": "Soup", "kind": "starter"]), role: .editor)?.pointer == "/data/kind")
    }

    @Test func aFileFieldChecksItsReference() {
        let photo = { (type: String, size: Int64) in
            BlobReference(sha256: String(repeating: "a", count: 64), size: size, contentType: type).json
        }
        #expect(rules.screen(op(.upsert, ["title": "S", "photo": photo("image/png", 10)]), role: .owner) == nil)
        #expect(rules.screen(op(.upsert, ["title": "S", "photo": photo("application/pdf", 10)]), role: .owner)?.pointer == "/data/photo")
        #expect(rules.screen(op(.upsert, ["title": "S", "photo": photo("image/png", 5000)]), role: .owner)?.pointer == "/data/photo")
        #expect(rules.screen(op(.upsert, ["title": "S", "photo": "a string"]), role: .owner)?.pointer == "/data/photo")
    }

    @Test func aPatchChecksOnlyTheFieldsItSets() {
        #expect(rules.screen(op(.patch, ["minutes": 5]), role: .editor) == nil)
        #expect(rules.screen(op(.patch, ["minutes": -1]), role: .editor)?.pointer == "/data/minutes")
        #expect(rules.screen(op(.patch, ["minutes": .null]), role: .editor) == nil)
        let removesRequired = rules.screen(op(.patch, ["title": .null]), role: .editor)
        #expect(removesRequired?.rule == "recipes.schema")
        #expect(removesRequired?.pointer == "/data/title")
        #expect(rules.screen(op(.patch, ["color": "red"], collection: "notes"), role: .editor)?.pointer == "/data/color")
    }

    @Test func opTypeRightsAreDecidedByRoleAtIntakeWhereTheyCanBe() {
        #expect(rules.screen(op(.publish), role: .editor)?.rule == "recipes.write.publish")
        #expect(rules.screen(op(.publish), role: .owner) == nil)
        // An editor may be the record's author: that waits for the record.
        #expect(rules.screen(op(.delete), role: .editor) == nil)
        #expect(rules.screen(op(.delete), role: .viewer)?.rule == "recipes.write.delete")
    }

    @Test func theAuthorIsTheUserWhoseOpCreatedTheRecord() {
        let hers = record(["title": "Soup"], creator: alice)
        #expect(rules.judge(op(.delete), record: hers, role: .editor, user: alice) == nil)
        #expect(rules.judge(op(.delete), record: hers, role: .editor, user: bob)?.rule == "recipes.write.delete")
        #expect(rules.judge(op(.delete), record: hers, role: .owner, user: bob) == nil)
        // A record written before authors were kept has none.
        #expect(rules.judge(op(.delete), record: record(["title": "Soup"], creator: nil), role: .editor, user: alice) != nil)
        // No record yet: its writer would be its author.
        #expect(rules.judge(op(.delete), record: nil, role: .editor, user: bob) == nil)
    }

    @Test func immutableFieldsAreSetAtCreationOnly() {
        let dessert = record(["title": "Pie", "kind": "dessert"], creator: alice)
        #expect(rules.judge(op(.upsert, ["title": "Pie", "kind": "main"]), record: nil, role: .editor, user: alice) == nil)
        let changed = rules.judge(op(.patch, ["kind": "main"]), record: dessert, role: .owner, user: alice)
        #expect(changed?.rule == "recipes.immutable.kind")
        #expect(changed?.pointer == "/data/kind")
        #expect(rules.judge(op(.upsert, ["title": "Tart", "kind": "dessert"]), record: dessert, role: .editor, user: alice) == nil)
        #expect(rules.judge(op(.upsert, ["title": "Tart"]), record: dessert, role: .editor, user: alice)?.rule == "recipes.immutable.kind")
        #expect(rules.judge(op(.patch, ["kind": .null]), record: dessert, role: .editor, user: alice)?.rule == "recipes.immutable.kind")
        #expect(rules.judge(op(.patch, ["title": "Tart"]), record: dessert, role: .editor, user: alice) == nil)
    }

    @Test func fieldRightsApplyToChangesOnly() {
        let priced = record(["title": "Pie", "price": 4], creator: alice)
        #expect(rules.judge(op(.patch, ["price": 5]), record: priced, role: .editor, user: alice)?.rule == "recipes.fields.price")
        #expect(rules.judge(op(.patch, ["price": 5]), record: priced, role: .owner, user: bob) == nil)
        // The whole record sent again, its price unchanged, changes no price.
        #expect(rules.judge(op(.upsert, ["title": "Tart", "price": 4]), record: priced, role: .editor, user: alice) == nil)
        #expect(rules.judge(op(.upsert, ["title": "Tart"]), record: priced, role: .editor, user: alice)?.rule == "recipes.fields.price")
        #expect(rules.judge(op(.upsert, ["title": "Tart", "price": 1]), record: nil, role: .editor, user: alice)?.rule == "recipes.fields.price")
    }

    @Test func applyJudgesWhatIntakeChecksToo() {
        // A job accepted before the rules changed is judged by the rules it meets.
        #expect(rules.judge(op(.upsert, ["minutes": 1]), record: nil, role: .owner, user: alice)?.rule == "recipes.schema")
        let strict = try! Rules.compile(["default": "deny"], version: 2)
        let refusal = strict.judge(op(.upsert, ["a": 1], collection: "todos"), record: nil, role: .owner, user: alice)
        #expect(refusal?.rule == "default")
        #expect(strict.screen(op(.upsert, ["a": 1], collection: "todos"), role: .owner)?.pointer == "/collection")
    }

    @Test func aForkCopyMustMatchTheSchema() {
        let fork = op(.fork)
        #expect(rules.judge(fork, record: nil, role: .owner, user: alice, copied: ["title": "Soup"]) == nil)
        #expect(rules.judge(fork, record: nil, role: .owner, user: alice, copied: ["name": "Soup"])?.rule == "recipes.schema")
    }

    @Test func theApplierRejectsWithTheRuleAndRemembersNothing() {
        let key = RecordKey(collection: "recipes", id: "r1")
        let judge = RulesJudge(rules: rules, user: bob, role: .editor)
        let created = JobApplier.apply(
            ops: [op(.upsert, ["title": "Pie", "kind": "dessert"])], records: [:], knownOpIDs: [], counter: 0, deviceID: nil,
            judge: RulesJudge(rules: rules, user: alice, role: .editor))
        #expect(created.records[key]?.creator == alice)
        var change = op(.patch, ["kind": "main"])
        change.opID = "00000000-0000-0000-0000-000000000002"
        let outcome = JobApplier.apply(
            ops: [change, op(.delete)], records: created.records, knownOpIDs: [], counter: 1, deviceID: nil, judge: judge)
        #expect(outcome.results.map(\.status) == [.rejected, .rejected])
        #expect(outcome.results.map(\.reason) == ["rule", "rule"])
        #expect(outcome.results.map(\.rule) == ["recipes.immutable.kind", "recipes.write.delete"])
        #expect(outcome.remembered.isEmpty)
        #expect(outcome.counter == 1)
    }

    @Test func recordsRememberTheirCreatorWithoutRules() {
        let outcome = JobApplier.apply(
            ops: [op(.upsert, ["title": "Pie"])], records: [:], knownOpIDs: [], counter: 0, deviceID: nil,
            judge: RulesJudge(rules: .none, user: alice, role: .owner))
        #expect(outcome.records[RecordKey(collection: "recipes", id: "r1")]?.creator == alice)
    }

    @Test func storedResultsKeepTheRule() throws {
        let results = [OpResult(opID: "a", status: .rejected, reason: "rule", rule: "recipes.schema")]
        let text = try OpResult.encodeStored(results)
        #expect(text == #"[{"reason":"rule","rule":"recipes.schema","status":"rejected"}]"#)
        #expect(try OpResult.decodeStored(text, opIDs: ["a"]) == results)
    }
}
