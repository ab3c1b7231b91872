import Foundation
import SyncModels
import SynclineUI
import Testing

/// One rule for typed reads: results carry the records that decode, and each record that
/// does not is reported (an event, once per version, and `LiveQuery.failures`), never
/// breaking the read.
@Suite("Undecodable records")
struct UndecodableRecordTests {
    struct Recipe: SyncRecord, Equatable {
        static let collection = "recipes"
        var id: String
        var title: String
        var minutes: Int
    }

    /// A record a patch brought back after a delete holds only the patched field.
    static func clientWithOneUndecodable() async throws -> SyncClient {
        let client = try SyncClient(ClientConfiguration(
            gatewayURL: URL(string: "http://127.0.0.1:9")!, databasePath: NSTemporaryDirectory() + "undecodable-\(UUID().uuidString).sqlite",
            tokenProvider: { _ in "unused" }, pollInterval: nil))
        try await client.save(Recipe(id: "r1", title: "Soup", minutes: 20))
        try await client.save(Recipe(id: "r2", title: "Cake", minutes: 60))
        try await client.delete(Recipe.self, id: "r2")
        try await client.patch("recipes", id: "r2", fields: ["title": "Cake again"])
        return client
    }

    @Test func fetchAndObserveCarryWhatDecodesAndReportTheRestOnce() async throws {
        let client = try await Self.clientWithOneUndecodable()
        #expect(try await client.record("recipes", id: "r2")?.data == ["title": "Cake again"], "a patch after a delete: only its fields")
        let events = client.events
        #expect(try await client.fetch(Recipe.self, orderBy: [Field.id.ascending]) == [Recipe(id: "r1", title: "Soup", minutes: 20)])
        #expect(try await client.fetch(Recipe.self).count == 1, "asked again: the same")
        var observed = try await client.observe(Recipe.self).makeAsyncIterator()
        #expect(await observed.next()?.map(\.id) == ["r1"])
        await #expect(throws: ClientError.self) { try await client.fetch(Recipe.self, id: "r2") }

        var reported: [UndecodableRecord] = []
        for await event in events {
            if case .undecodable(let failure) = event { reported.append(failure) }
            if case .pulled = event { break }
            if reported.count >= 1 { break }
        }
        #expect(reported.map(\.id) == ["r2"])
        #expect(reported.first?.detail.contains("minutes") == true, "\(reported)")
    }

    #if canImport(Observation)
    @MainActor @Test func aLiveQueryShowsWhatDecodesAndListsTheRest() async throws {
        let client = try await Self.clientWithOneUndecodable()
        let live = LiveQuery<Recipe>(client, orderBy: [Field.id.ascending])
        let deadline = ContinuousClock.now + .seconds(30)  // a loaded machine's cooperative threads may be busy
        while live.records.isEmpty, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        #expect(live.records.map(\.id) == ["r1"])
        #expect(live.failures.map(\.id) == ["r2"])
        #expect(live.error == nil)
    }
    #endif
}
