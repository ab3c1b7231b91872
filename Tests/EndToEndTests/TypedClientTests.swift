import Foundation
import SynclineClient
import SynclineUI
import Testing
import TestSupport

/// Typed records, queries, query observation and the status stream against the real stack.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct TypedClientTests {
    struct Recipe: SyncRecord, Equatable {
        static let collection = "recipes"
        var id: String
        var title: String
        var minutes: Int
        var vegan = false
        var rating: Double?
    }

    /// Two devices, each a process of its own, edit different fields of one recipe while
    /// apart; `update` sends only the field it changed, so both edits survive everywhere.
    @Test func typedClientsInSeparateProcessesConverge() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let token = await E2E.token(ClientTests.user())
            let directory = E2E.environment["SYNCLINE_TEST_OUTPUT"] ?? NSTemporaryDirectory()
            let (a, b) = ("\(directory)/typed-a-\(UUID().uuidString.prefix(8)).sqlite", "\(directory)/typed-b-\(UUID().uuidString.prefix(8)).sqlite")
            func run(_ database: String, _ command: String) -> Int32 {
                ClientProcessTests.run("\(stack.client.base) \(database) \(command)", token: token)
            }
            #expect(run(a, "save r1 Soup 30") == 0 && run(a, "save r2 Bread 90") == 0 && run(a, "sync") == 0)
            #expect(run(b, "sync") == 0)
            #expect(run(b, "update r1 minutes=45") == 0)  // offline on B
            #expect(run(a, "update r1 title=Stew") == 0 && run(a, "sync") == 0)
            #expect(run(b, "sync") == 0 && run(a, "sync") == 0)
            let outputs = try [a, b].map { database in
                let file = "\(database).out"
                #expect(Shell.run("CLIENT_TOKEN=\(token) \(E2E.binaries)/ClientProcess \(stack.client.base) \(database) recipes > \(file)") == 0)
                return try String(contentsOfFile: file, encoding: .utf8)
            }
            #expect(outputs[0] == "r2 Bread 90\nr1 Stew 45\n")
            #expect(outputs[1] == outputs[0])
        }
    }

    /// An observer of a query wakes for a pulled change that matches it, and not for one
    /// that does not; a record leaving the query wakes it too.
    @Test func aQueryObserverWakesForMatchingRemoteChangesOnly() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let user = ClientTests.user()
            let a = try ClientTests.device(stack, user: user), b = try ClientTests.device(stack, user: user)
            let deliveries = Deliveries<[Recipe]>()
            let observed = try await b.client.observe(Recipe.self, where: Field("vegan") == true, orderBy: [Field("title").ascending])
            let consumer = Task { for await recipes in observed { await deliveries.append(recipes) } }
            defer { consumer.cancel() }
            _ = try await eventually(within: 5, "the first result") { await deliveries.count == 1 ? true : nil }

            func pulledByB(_ write: () async throws -> Void) async throws {
                try await write()
                try await a.client.sync()
                try await b.client.sync()
                try await Task.sleep(for: .milliseconds(300))  // an observer woken needlessly would have delivered by now
            }
            try await pulledByB { try await a.client.save(Recipe(id: "r1", title: "Steak", minutes: 20)) }
            #expect(await deliveries.count == 1, "a change outside the query woke it")
            try await pulledByB { try await a.client.save(Recipe(id: "r2", title: "Salad", minutes: 10, vegan: true)) }
            #expect(await deliveries.count == 2)
            #expect(await deliveries.last?.map(\.id) == ["r2"])
            try await pulledByB { try await a.client.update(Recipe.self, id: "r1") { $0.minutes = 25 } }
            #expect(await deliveries.count == 2, "an edit of a record outside the query woke it")
            try await pulledByB { try await a.client.update(Recipe.self, id: "r2") { $0.vegan = false } }
            #expect(await deliveries.count == 3)
            #expect(await deliveries.last == [])
            #expect(try await b.client.fetch(Recipe.self, id: "r1") == Recipe(id: "r1", title: "Steak", minutes: 25))
        }
    }

    /// `statusUpdates` follows a write through its sync, without polling.
    @Test func statusUpdatesFollowAWriteThroughItsSync() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let a = try ClientTests.device(stack, user: ClientTests.user())
            let statuses = Deliveries<SyncStatus>()
            let consumer = Task { for await status in a.client.statusUpdates { await statuses.append(status) } }
            defer { consumer.cancel() }
            _ = try await eventually(within: 5, "the first status") { await statuses.count >= 1 ? true : nil }
            try await a.client.save(Recipe(id: "r1", title: "Soup", minutes: 30))
            _ = try await eventually(within: 5, "a pending op") { await statuses.last?.pendingOps == 1 ? true : nil }
            try await a.client.sync()
            let synced = try await eventually(within: 5, "the op confirmed") {
                await statuses.last.flatMap { $0.pendingOps == 0 && $0.lastSyncAt != nil ? $0 : nil }
            }
            #expect(synced.lastError == nil && synced.setAsideOps == 0)
        }
    }

    /// `LiveQuery` (the SwiftUI binding) keeps its records and status current on the main actor.
    @Test func aLiveQueryFollowsItsRecords() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let a = try ClientTests.device(stack, user: ClientTests.user())
            let client = a.client
            let quick = await MainActor.run {
                LiveQuery<Recipe>(client, where: Field("minutes") <= 30, orderBy: [Field("title").ascending])
            }
            try await client.save(Recipe(id: "r1", title: "Soup", minutes: 30))
            try await client.save(Recipe(id: "r2", title: "Roast", minutes: 120))
            try await client.save(Recipe(id: "r3", title: "Salad", minutes: 10))
            _ = try await eventually(within: 5, "the live query's records") {
                await MainActor.run { quick.records.map(\.id) } == ["r3", "r1"] ? true : nil
            }
            try await client.sync()
            _ = try await eventually(within: 5, "the live query's status") {
                await MainActor.run { quick.status?.pendingOps } == 0 ? true : nil
            }
            #expect(await MainActor.run { quick.error } == nil)
        }
    }

    /// What JSON cannot carry is refused at the typed call, naming the field; the rest syncs.
    @Test func aNaNIsRefusedAtTheTypedCallAndTheRestSyncs() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let user = ClientTests.user()
            let a = try ClientTests.device(stack, user: user)
            try await a.client.save(Recipe(id: "r1", title: "Soup", minutes: 30))
            do {
                try await a.client.save(Recipe(id: "r2", title: "Bad", minutes: 1, rating: .nan))
                Issue.record("a NaN was accepted")
            } catch ClientError.invalidOp(let detail) {
                #expect(detail.contains("rating"), "\(detail)")
            }
            await #expect(throws: ClientError.self) { try await a.client.update(Recipe.self, id: "r1") { $0.rating = .infinity } }
            try await a.client.save(Recipe(id: "r3", title: "Salad", minutes: 10))
            try await a.client.sync()
            #expect(try await a.client.setAside().isEmpty)
            #expect(Set(try await ClientTests.server(stack, user, "recipes").keys) == ["r1", "r3"])
            #expect(try await a.client.count(Recipe.self) == 2)
        }
    }
}

/// What a consumer of a stream received, in order.
actor Deliveries<Element: Sendable> {
    private(set) var all: [Element] = []
    var count: Int { all.count }
    var last: Element? { all.last }
    func append(_ element: Element) { all.append(element) }
}
