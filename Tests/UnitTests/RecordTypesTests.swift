import Foundation
@testable import Operations
import SyncModels
import Testing

/// `syncctl rules types`: the record types printed from a rules document. The meal
/// planner's are checked in beside the code that compiles them — `GeneratedRecords.swift`
/// in this target (Swift) and `test/types/generated-records.ts` in SynclineWeb (tsc) — and
/// the generator must print exactly those.
@Suite("Record types from the rules")
struct RecordTypesTests {
    static let mealPlanner = """
        default: deny
        collections:
          recipes:
            schema:
              type: object
              required: [title]
              properties:
                title: {type: string, minLength: 1, maxLength: 200}
                minutes: {type: integer, minimum: 0}
                kind: {enum: [breakfast, main, dessert]}
                price: {type: [number, "null"]}
                tags: {type: array, items: {type: string}}
                photo: {type: file, contentTypes: ["image/*"]}
                cooked_at: {type: string}
                steps:
                  type: array
                  items:
                    type: object
                    required: [text]
                    properties:
                      text: {type: string}
                      done: {type: boolean}
                extra: {}
          shopping:
            schema:
              type: object
              required: [name, done]
              properties:
                name: {type: string}
                done: {type: boolean}
          notes: {}
        """

    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test func theSwiftTypesAreTheOnesThisTargetCompiles() throws {
        let rules = try RulesBook.read(Self.mealPlanner, format: .yaml)
        let checkedIn = try String(contentsOf: Self.root.appendingPathComponent("Tests/UnitTests/GeneratedRecords.swift"), encoding: .utf8)
        #expect(RecordTypes.swift(rules) == checkedIn)
    }

    @Test func theTypeScriptTypesAreTheOnesTheWebTestsTypeCheck() throws {
        let rules = try RulesBook.read(Self.mealPlanner, format: .yaml)
        let checkedIn = try String(
            contentsOf: Self.root.appendingPathComponent("Shared/SynclineWeb/test/types/generated-records.ts"), encoding: .utf8)
        #expect(RecordTypes.typescript(rules) == checkedIn)
    }

    @Test func generatedRecordsDecodeWhatTheSchemaAllows() throws {
        let json = #"{"id":"r1","title":"Soup","steps":[{"text":"boil"}],"cooked_at":"2026-11-28","price":null,"extra":{"any":[1]}}"#
        let recipe = try JSONDecoder().decode(Recipe.self, from: Data(json.utf8))
        #expect(recipe.title == "Soup" && recipe.minutes == nil && recipe.steps?.first?.text == "boil" && recipe.cookedAt == "2026-11-28")
        #expect(recipe.extra == ["any": [1]])
    }

    @Test func namesBecomeTypesAndProperties() {
        #expect(RecordTypes.singular("recipes") == "recipe")
        #expect(RecordTypes.singular("categories") == "category")
        #expect(RecordTypes.singular("shopping") == "shopping")
        #expect(RecordTypes.typeName("meal_plans") == "MealPlans")
        #expect(RecordTypes.identifier("cooked_at") == "cookedAt")
        #expect(RecordTypes.identifier("default") == "`default`")
    }
}
