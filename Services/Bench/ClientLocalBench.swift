import ArgumentParser
import Foundation
import SyncModels
import SynclineClient

/// SynclineClient's local store alone, no server: how long a write takes while queries are
/// observed, and how long queries take, at several collection sizes.
struct ClientLocalBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "client-local",
        abstract: "Benchmark SynclineClient's local store: writes while queries are observed, queries with and without an index.")

    @Option(help: "Collection sizes, comma-separated.") var sizes = "1000,10000,100000"
    @Option(help: "Numbers of observed queries, comma-separated.") var observers = "0,1,10"
    @Option(help: "Writes measured per size and number of observers.") var writes = 2_000
    @Option(help: "Query runs measured per query.") var queries = 200
    @Option(help: "Directory for the SQLite files.") var directory = NSTemporaryDirectory()

    static let categories = 50

    func run() async throws {
        let sizes = self.sizes.split(separator: ",").compactMap { Int($0) }
        let observerCounts = self.observers.split(separator: ",").compactMap { Int($0) }
        print("bench-client-local: \(writes) writes per row; each observer watches `category == k` ordered by minutes, limit 50 (indexed); half the writes touch an observed category")
        for size in sizes {
            let client = try SyncClient(ClientConfiguration(
                gatewayURL: URL(string: "http://127.0.0.1:9")!, databasePath: "\(directory)/local-bench-\(UUID().uuidString.prefix(8)).sqlite",
                tokenProvider: { _ in "" }, pollInterval: nil,
                indexes: [LocalIndex("recipes", on: "category", "minutes"), LocalIndex("recipes", on: "title")]))
            let filled = Date()
            for n in 0..<size { try await client.upsert("recipes", id: "r\(n)", data: Self.recipe(n, category: n % Self.categories)) }
            print(String(format: "%d records: filled in %.1f s", size, Date().timeIntervalSince(filled)))
            for count in observerCounts {
                try await measureWrites(client, size: size, observers: count)
            }
            try await measureQueries(client, size: size)
        }
    }

    static func recipe(_ n: Int, category: Int) -> [String: JSONValue] {
        ["title": .string("recipe \(n)"), "minutes": .int(Int64(n % 180)), "category": .int(Int64(category)), "vegan": .bool(n % 3 == 0)]
    }

    func measureWrites(_ client: SyncClient, size: Int, observers count: Int) async throws {
        let deliveries = Counter()
        var consumers: [Task<Void, Never>] = []
        for k in 0..<count {
            let stream = try await client.observe(RecordQuery(
                "recipes", where: Field("category") == .int(Int64(k)), orderBy: [Field("minutes").ascending], limit: 50))
            consumers.append(Task { for await _ in stream { deliveries.add() } })
        }
        while deliveries.value < count { try await Task.sleep(for: .milliseconds(5)) }
        var latencies: [Double] = []
        var random = SystemRandomNumberGenerator()
        let warmup = writes / 10  // statements prepared, pages cached: left out of the figures
        for n in 0..<(warmup + writes) {
            let id = Int.random(in: 0..<size, using: &random)
            let category = n % 2 == 0 && count > 0 ? n % count : count + n % (Self.categories - count)
            let started = DispatchTime.now().uptimeNanoseconds
            try await client.upsert("recipes", id: "r\(id)", data: Self.recipe(id + n, category: category))
            if n >= warmup { latencies.append(Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9) }
        }
        try await Task.sleep(for: .milliseconds(200))
        consumers.forEach { $0.cancel() }
        let figures = Percentiles(latencies)
        print(String(format: "  write, %2d observers: p50 %.2f ms, p99 %.2f ms, max %.2f ms; %d results delivered",
                     count, figures.at(0.5) * 1000, figures.at(0.99) * 1000, figures.at(1) * 1000, deliveries.value - count))
    }

    func measureQueries(_ client: SyncClient, size: Int) async throws {
        let cases: [(String, RecordQuery)] = [
            ("indexed: category == 7 by minutes, limit 20", RecordQuery(
                "recipes", where: Field("category") == 7, orderBy: [Field("minutes").ascending], limit: 20)),
            ("indexed: title == \"recipe 4242\"", RecordQuery("recipes", where: Field("title") == "recipe 4242")),
            ("no index: minutes == 42, limit 20", RecordQuery("recipes", where: Field("minutes") == 42, limit: 20)),
        ]
        for (name, query) in cases {
            var latencies: [Double] = []
            var found = 0
            for _ in 0..<queries {
                let started = DispatchTime.now().uptimeNanoseconds
                found = try await client.records(query).count
                latencies.append(Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9)
            }
            let figures = Percentiles(latencies)
            print(String(format: "  query, %@: p50 %.2f ms, p99 %.2f ms (%d records)", name, figures.at(0.5) * 1000, figures.at(0.99) * 1000, found))
        }
        var counts: [Double] = []
        for _ in 0..<max(10, queries / 10) {
            let started = DispatchTime.now().uptimeNanoseconds
            _ = try await client.count(RecordQuery("recipes", where: Field("category") == 7))
            counts.append(Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9)
        }
        print(String(format: "  count, indexed: category == 7: p50 %.2f ms", Percentiles(counts).at(0.5) * 1000))
    }

    /// A count shared with the consumers of observed queries.
    final class Counter: @unchecked Sendable {
        // @unchecked: `count` is read and written under `lock`.
        private let lock = NSLock()
        private var count = 0
        func add() { lock.withLock { count += 1 } }
        var value: Int { lock.withLock { count } }
    }
}
