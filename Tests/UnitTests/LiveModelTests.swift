import Foundation
import SynclineTesting
import SynclineUI
import Testing

/// SynclineUI's models as a SwiftUI screen uses them, on Linux (no SwiftUI here): a list
/// whose request a search field changes, a detail screen that tells loading from deleted,
/// rows that say where their edits stand.
@Suite("Live models for SwiftUI", .timeLimit(.minutes(1)))
@MainActor
struct LiveModelTests {
    struct Recipe: SyncRecord, Equatable {
        static let collection = "recipes"
        enum CodingKeys: String, CodingKey { case id, title, minutes }
        var id: String
        var title: String
        var minutes: Int
    }

    /// A client that never reaches a server, its store in memory.
    static func offlineClient() throws -> SyncClient {
        try SyncClient(ClientConfiguration(
            gatewayURL: URL(string: "http://127.0.0.1:9")!, databasePath: ":memory:", tokenProvider: { _ in "unused" },
            pollInterval: nil))
    }

    /// Waits (up to 30 s: a loaded machine's cooperative threads may be busy) on the main
    /// actor until `condition` holds.
    static func until(_ what: String, _ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while !condition() {
            guard ContinuousClock.now < deadline else {
                Issue.record("not within 30 s: \(what)")
                return
            }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    /// Keystrokes change the request: the rows follow the last one, the old rows show until
    /// the new ones come (no empty flash), and an old request's results never show after it.
    @Test func aSearchFieldChangesTheRequestAndTheRowsFollowTheLastOne() async throws {
        let client = try Self.offlineClient()
        for (n, title) in ["Pancakes", "Pasta", "Panna cotta", "Stew", "Salad", "PANZANELLA"].enumerated() {
            try await client.save(Recipe(id: "r\(n)", title: title, minutes: 10 * (n + 1)))
        }
        let title = Recipe.field(.title)
        let live = LiveQuery<Recipe>(client, request: RecordRequest(orderBy: [title.ascending]))
        try await Self.until("the first rows") { !live.isLoading }
        #expect(live.rows.count == 6)

        live.request.filter = title.hasPrefix("p")
        #expect(live.isLoading && live.rows.count == 6, "the last rows show until the new ones come")
        live.request.filter = title.hasPrefix("pa")
        live.request.filter = title.contains("pan")
        try await Self.until("the last request's rows") { !live.isLoading }
        #expect(live.records.map(\.title) == ["PANZANELLA", "Pancakes", "Panna cotta"], "whatever the case")
        try await Task.sleep(for: .milliseconds(200))
        #expect(live.records.map(\.title) == ["PANZANELLA", "Pancakes", "Panna cotta"], "no earlier request's rows came after")

        live.request.limit = 1
        try await Self.until("the limited rows") { !live.isLoading }
        #expect(live.records.map(\.title) == ["PANZANELLA"])
        try await client.save(Recipe(id: "r9", title: "Pan bagnat", minutes: 5))
        live.request.limit = nil
        try await Self.until("a write and a change of request") { !live.isLoading && live.rows.count == 4 }
        #expect(live.error == nil)
    }

    /// A model made before its client (a view's `@State`, the client from the environment)
    /// shows nothing and loads once it has one.
    @Test func aModelWithoutAClientWaitsForOne() async throws {
        let client = try Self.offlineClient()
        try await client.save(Recipe(id: "r1", title: "Soup", minutes: 20))
        let live = LiveQuery<Recipe>(nil)
        let detail = LiveRecord<Recipe>(nil, id: "r1")
        try await Task.sleep(for: .milliseconds(100))
        #expect(live.isLoading && live.rows.isEmpty && detail.state == .loading)
        live.client = client
        detail.client = client
        try await Self.until("both loaded") { !live.isLoading && detail.record != nil }
        #expect(live.records == [Recipe(id: "r1", title: "Soup", minutes: 20)])
        try await Self.until("the status") { live.status?.pendingOps == 1 }
    }

    /// A detail screen: loading, then missing until written, present, missing once deleted,
    /// undecodable for data the type cannot read; another id is loading until read.
    @Test func aLiveRecordTellsLoadingFromMissingFromPresent() async throws {
        let client = try Self.offlineClient()
        let detail = LiveRecord<Recipe>(client, id: "r1")
        #expect(detail.state == .loading)
        try await Self.until("known missing") { detail.state == .missing }
        try await client.save(Recipe(id: "r1", title: "Soup", minutes: 20))
        try await Self.until("present") { detail.record?.title == "Soup" }
        guard case .present(let row) = detail.state else { Issue.record("not present: \(detail.state)"); return }
        #expect(row.syncState == .pending && row.version == 0 && row.minutes == 20)
        try await client.delete(Recipe.self, id: "r1")
        try await Self.until("missing once deleted") { detail.state == .missing }

        try await client.upsert("recipes", id: "r2", data: ["title": "Cake"])
        detail.id = "r2"
        #expect(detail.state == .loading)
        try await Self.until("undecodable: no minutes") {
            if case .undecodable(let failure) = detail.state { return failure.detail.contains("minutes") }
            return false
        }
    }

    /// Typed reads carry each row's sync state: pending until the server confirms, synced
    /// after, set aside with the server's reason when refused.
    @Test func rowsSayWhereTheirEditsStand() async throws {
        let server = try await FakeSyncServer.start()
        server.refuse { $0.id == "refused" ? .invalid("too long for this app") : nil }
        let client = try SyncClient(server.configuration(user: "alice", databasePath: ":memory:"))
        try await client.save(Recipe(id: "fine", title: "Bread", minutes: 60))
        try await client.save(Recipe(id: "refused", title: "Soup", minutes: 5))
        let request = RecordRequest<Recipe>(orderBy: [Field.id.ascending])
        #expect(try await client.rows(request).rows.map(\.syncState) == [.pending, .pending])
        try await client.sync(timeout: 10)
        let rows = try await client.rows(request).rows
        #expect(rows.map(\.id) == ["fine", "refused"])
        #expect(rows.map(\.syncState) == [.synced, .setAside(reason: "too long for this app")])
        #expect(rows.first?.version == 1)
        try await server.shutdown()
    }
}
