import Foundation
import NIOConcurrencyHelpers
import SyncModels
import SynclineClient
import Testing
import TestSupport

/// SynclineClient holding the app's rules, against real services on a database of its own
/// (the rules are the deployment's): a write the rules refuse is refused at the call, an op
/// written offline that a new version refuses is set aside with the rule's name, and a
/// call's guess shows until the backend's answer replaces it.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct ClientRulesTests {
    static func rules(titleRequired: Bool, hookPort: Int? = nil) -> String {
        let hook = hookPort.map { #", "hook": {"url": "http://127.0.0.1:\#($0)/calls", "secret": "\#(HookTests.secret)"}"# } ?? ""
        let required = titleRequired ? #""required": ["title"], "# : ""
        return """
            {"collections": {
              "recipes": {"schema": {"type": "object", \(required)"properties": {"title": {"type": "string", "maxLength": 40}}},
                          "write": {"publish": ["owner"]}},
              "items": {"write": {}\(hook)}}}
            """
    }

    @Test func theRulesAreHeldRefusedAtTheCallAndAppliedToTheOutboxWhenTheyChange() async throws {
        try await OwnDatabase.with { database in
            try await InProcessStack.with(workers: 1, environment: database.environment) { stack in
                try await HookTests.applyRules(stack.client, Self.rules(titleRequired: false))
                let user = ClientTests.user()
                let device = try ClientTests.device(stack, user: user)
                defer { device.collector.cancel() }
                let client = device.client
                try await client.upsert("recipes", id: "r0", data: ["title": "Soup"])
                try await client.sync(timeout: 20)

                // Refused at the call by the rules fetched: nothing stored.
                await #expect(throws: ClientError.refusedByRule(rule: "recipes.schema", detail: "title must be at most 40 characters long")) {
                    try await client.upsert("recipes", id: "r1", data: ["title": .string(String(repeating: "x", count: 41))])
                }
                #expect(try await client.record("recipes", id: "r1") == nil)

                // Written offline (no sync), then the rules change: the op is set aside, never sent.
                let untitled = try await client.upsert("recipes", id: "r2", data: ["minutes": 5])
                try await client.upsert("recipes", id: "r3", data: ["title": "Pie"])
                try await HookTests.applyRules(stack.client, Self.rules(titleRequired: true))
                try await client.sync(timeout: 20)
                let aside = try await client.setAside()
                #expect(aside.map(\.opID) == [untitled])
                #expect(aside.first?.reason == "rule:recipes.schema")
                #expect(try await client.record("recipes", id: "r2")?.syncState == .setAside(reason: "rule:recipes.schema"))
                try await eventually(within: 5, "the app hears of it") {
                    await device.log.events.contains(.setAside(opID: untitled, reason: "rule:recipes.schema")) ? true : nil
                }
                let server = try await ClientTests.server(stack, user, "recipes")
                #expect(server.keys.sorted() == ["r0", "r3"], "the refused op never reached the server")
            }
        }
    }

    /// The app's backend for calls: each call reserves two of its item, by the backend's word
    /// (after 0.3 s, so that a guess shows meanwhile).
    static func reservingBackend() throws -> WebhookReceiver {
        try WebhookReceiver { _, body in
            let request = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] ?? [:]
            let calls = (request["calls"] as? [[String: Any]] ?? []).map { call -> [String: Any] in
                ["op_id": call["op_id"] ?? "", "ops": [["type": "patch", "collection": "items", "id": call["id"] ?? "", "data": ["reserved": 2, "by": "backend"]]]]
            }
            return (200, 0.3, Array(try! JSONSerialization.data(withJSONObject: ["calls": calls])))
        }
    }

    @Test func aCallShowsItsGuessUntilTheBackendsAnswerReplacesIt() async throws {
        let backend = try Self.reservingBackend()
        defer { backend.close() }
        try await OwnDatabase.with { database in
            try await InProcessStack.with(workers: 1, environment: database.environment.merging(["ALLOW_PRIVATE_WEBHOOKS": "true"]) { $1 }) { stack in
                try await HookTests.applyRules(stack.client, Self.rules(titleRequired: false, hookPort: backend.port))
                let device = try ClientTests.device(stack, user: ClientTests.user())
                defer { device.collector.cancel() }
                let client = device.client
                try await client.upsert("items", id: "rope", data: ["name": "Rope"])
                try await client.call("items", id: "rope", name: "reserve", args: ["qty": 2], guess: ["reserved": 2, "by": "guess"])
                #expect(try await client.record("items", id: "rope")?.data == ["name": "Rope", "reserved": 2, "by": "guess"])
                try await client.sync(timeout: 20)
                let events = await device.log.events
                #expect(try await client.record("items", id: "rope")?.data == ["name": "Rope", "reserved": 2, "by": "backend"], "\(events)")
                // Asked at least once: a job delivered twice (its publish confirmed late on a
                // loaded machine, then relayed) may ask again; its effect is once either way.
                #expect(!backend.requests.isEmpty)
                for request in backend.requests {
                    let sent = try JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any]
                    #expect((sent?["calls"] as? [[String: Any]])?.first?["guess"] == nil, "the guess is the device's alone")
                }
            }
        }
    }
}
