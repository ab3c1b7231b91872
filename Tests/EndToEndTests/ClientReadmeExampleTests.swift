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

    static func example(gateway: URL, fanout: URL, databasePath: String, signIn: SignIn) async throws -> SyncClient {
        // README example start
        let client = try SyncClient(ClientConfiguration(
            gatewayURL: gateway, fanoutURL: fanout, databasePath: databasePath,
            tokenProvider: { refresh in try await signIn.token(refresh: refresh) }))
        await client.start()
        try await client.upsert("todos", id: "t1", data: ["title": "Buy milk", "done": false])
        try await client.patch("todos", id: "t1", fields: ["done": true])
        for await todos in await client.observe("todos") where todos.first?.hasPendingEdits == false {
            print(todos.map(\.data))  // [["done": true, "title": "Buy milk"]], confirmed by the server
            break
        }
        print(try await client.status())  // pending ops, oldest pending age, last sync, last error, set-aside ops
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
            #expect(try await client.record("todos", id: "t1")?.data == ["title": "Buy milk", "done": true])
            #expect(try await ClientTests.server(stack, user)["t1"] == ["title": "Buy milk", "done": true])
            await client.stop()

            let source = try String(contentsOfFile: #filePath, encoding: .utf8)
            let start = try #require(source.range(of: "// README example start\n")), end = try #require(source.range(of: "        // README example end"))
            let lines = source[start.upperBound..<end.lowerBound].split(separator: "\n", omittingEmptySubsequences: false)
            let example = lines.map { $0.hasPrefix("        ") ? String($0.dropFirst(8)) : String($0) }.joined(separator: "\n")
            let readme = try String(contentsOfFile: URL(fileURLWithPath: #filePath).deletingLastPathComponent()
                .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("README.md").path, encoding: .utf8)
            #expect(readme.contains(example), "README's example differs from the one this test runs:\n\(example)")
        }
    }
}
