import Foundation
import SynclineClient
import Testing

/// The README's "Use it from an app" example, compiled and run against the real stack.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct ClientReadmeExampleTests {
    /// Stands in for the app's own sign-in.
    struct SignIn: Sendable {
        let user: String
        func token(refresh: Bool) async throws -> String { await E2E.token(user) }
    }

    // README example start
    struct Recipe: SyncRecord {
        static let collection = "recipes"
        var id: String
        var title: String
        var minutes: Int
        var tags: [String] = []
    }
    // README example end

    static func example(gateway: URL, fanout: URL, databasePath: String, signIn: SignIn) async throws -> SyncClient {
        // README example start
        let client = try SyncClient(ClientConfiguration(
            gatewayURL: gateway, fanoutURL: fanout, databasePath: databasePath,
            tokenProvider: { refresh in try await signIn.token(refresh: refresh) },
            indexes: [LocalIndex("recipes", on: "minutes")]))
        await client.start()
        try await client.save(Recipe(id: "r1", title: "Pancakes", minutes: 20, tags: ["sweet"]))
        try await client.save(Recipe(id: "r2", title: "Stew", minutes: 90))
        try await client.update(Recipe.self, id: "r1") { $0.tags.append("quick") }  // sends only `tags`
        let quick = Field("minutes") <= 30
        print(try await client.fetch(Recipe.self, where: quick).map(\.title))  // ["Pancakes"]
        for await recipes in try await client.observe(Recipe.self, where: quick, orderBy: [Field("title").ascending]) {
            print(recipes.map(\.tags))  // [["sweet", "quick"]], now and after every change that concerns it
            break
        }
        for await status in client.statusUpdates where status.pendingOps == 0 && status.lastSyncAt != nil {
            print(status)  // no pending op: the server confirmed every edit
            break
        }
        // README example end
        return client
    }

    @Test func theReadmeExampleRunsAndIsTheOneInTheReadme() async throws {
        try await Stack.with(workers: 1, fanouts: 1) { stack in
            let directory = E2E.environment["SYNCLINE_TEST_OUTPUT"] ?? NSTemporaryDirectory()
            let user = "readme-\(UUID().uuidString.prefix(8))"
            let client = try await Self.example(
                gateway: URL(string: stack.client.base)!, fanout: URL(string: "http://127.0.0.1:\(stack.fanouts[0].port)")!,
                databasePath: "\(directory)/readme-\(UUID().uuidString.prefix(8)).sqlite", signIn: SignIn(user: user))
            #expect(try await client.fetch(Recipe.self, id: "r1")?.tags == ["sweet", "quick"])
            #expect(try await ClientTests.server(stack, user, "recipes")["r1"] == ["title": "Pancakes", "minutes": 20, "tags": ["sweet", "quick"]])
            #expect(try await ClientTests.server(stack, user, "recipes")["r2"] == ["title": "Stew", "minutes": 90, "tags": []])
            await client.stop()

            let source = try String(contentsOfFile: #filePath, encoding: .utf8)
            let readme = try String(contentsOfFile: URL(fileURLWithPath: #filePath).deletingLastPathComponent()
                .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("README.md").path, encoding: .utf8)
            let parts = source.components(separatedBy: "// README example start\n").dropFirst()
            #expect(parts.count == 2)
            for part in parts {
                let body = try #require(part.components(separatedBy: "// README example end").first)
                let lines = body.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
                let indent = lines.first.map { $0.prefix { $0 == " " }.count } ?? 0
                let example = lines.map { String($0.dropFirst(indent)) }.joined(separator: "\n")
                #expect(readme.contains(example), "README's example differs from the one this test runs:\n\(example)")
            }
        }
    }
}
