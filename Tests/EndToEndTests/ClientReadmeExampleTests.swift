import Foundation
import SynclineClient
import Testing
import TestSupport

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
        enum CodingKeys: String, CodingKey { case id, title, minutes, tags, photo }
        static var defaults: KeyValuePairs<CodingKeys, JSONValue> { [.tags: []] }  // for records saved without tags
        var id: String
        var title: String
        var minutes: Int
        var tags: [String] = []
        var photo: BlobRef? = nil  // a file: uploaded before the record, kept while referenced
    }
    // README example end

    static func example(gateway: URL, fanout: URL, databasePath: String, signIn: SignIn, pancakesJPEG: Data) async throws -> SyncClient {
        // README example start
        let client = try SyncClient(ClientConfiguration(
            gatewayURL: gateway, fanoutURL: fanout, databasePath: databasePath,
            tokenProvider: { refresh in try await signIn.token(refresh: refresh) },
            indexes: [LocalIndex(Recipe.self, on: .minutes)]))
        await client.start()
        let photo = try await client.attach(data: pancakesJPEG, contentType: "image/jpeg")
        try await client.save(Recipe(id: "r1", title: "Pancakes", minutes: 20, tags: ["sweet"], photo: photo))
        try await client.save(Recipe(id: "r2", title: "Stew", minutes: 90))
        try await client.update(Recipe.self, id: "r1") { $0.tags.append("quick") }  // sends only `tags`
        let quick = Recipe.field(.minutes) <= 30  // fields by the record's CodingKeys: a typo does not compile
        print(try await client.fetch(Recipe.self, where: quick).map(\.title))  // ["Pancakes"]
        for await recipes in try await client.observe(Recipe.self, where: quick, orderBy: [Recipe.field(.title).ascending]) {
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
        try await InProcessStack.with(workers: 1, fanouts: 1) { stack in
            let directory = E2E.environment["SYNCLINE_TEST_OUTPUT"] ?? NSTemporaryDirectory()
            let user = "readme-\(UUID().uuidString.prefix(8))"
            let jpeg = Data((0..<50_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
            let client = try await Self.example(
                gateway: URL(string: stack.client.base)!, fanout: URL(string: "http://127.0.0.1:\(stack.fanoutPorts[0])")!,
                databasePath: "\(directory)/readme-\(UUID().uuidString.prefix(8)).sqlite", signIn: SignIn(user: user),
                pancakesJPEG: jpeg)
            let pancakes = try #require(try await client.fetch(Recipe.self, id: "r1"))
            #expect(pancakes.tags == ["sweet", "quick"])
            let photo = try #require(pancakes.photo)
            #expect(try await ClientTests.server(stack, user, "recipes")["r1"] == [
                "title": "Pancakes", "minutes": 20, "tags": ["sweet", "quick"], "photo": photo.json,
            ])
            #expect(try Data(contentsOf: try await client.blob(photo)) == jpeg)
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
