import ArgumentParser
import Auth
import Foundation
import PQBridge
import ServiceSupport
import SyncModels
import SynclineClient

/// SynclineClient against a running stack: local write latency while offline, how fast the
/// offline outbox drains once the client syncs, and an initial sync of many records into an
/// empty client.
struct ClientBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "client", abstract: "Benchmark SynclineClient: offline writes, draining them, an initial sync.")

    @Option(help: "Gateway base URL.") var url = "http://127.0.0.1:8080"
    @Option(help: "Ops written offline, then drained.") var ops = 10_000
    @Option(help: "Records on the server for the initial sync.") var records = 100_000
    @Option(help: "Directory for the clients' SQLite files.") var directory = NSTemporaryDirectory()

    func run() async throws {
        let configuration = try Configuration.fromEnvironment()
        let signer = try await TokenMinter(secret: try configuration.requireJWTSecret())
        let run = UUID().uuidString.prefix(8).lowercased()
        let token = try await signer.sign(Claims(sub: "cbench-\(run)", exp: Int64(Date().timeIntervalSince1970) + 3600))
        guard let gateway = URL(string: url) else { throw ValidationError("bad --url") }
        func client(_ name: String) throws -> SyncClient {
            try SyncClient(ClientConfiguration(
                gatewayURL: gateway, databasePath: "\(directory)/cbench-\(run)-\(name).sqlite", tokenProvider: { _ in token },
                deviceName: "bench", pollInterval: nil))
        }

        // Offline writes: nothing is sent until sync() is called.
        let writer = try client("writer")
        var latencies: [Double] = []
        latencies.reserveCapacity(ops)
        for n in 0..<ops {
            let started = Date()
            try await writer.upsert("notes", id: "n\(n)", data: ["title": .string("note \(n)"), "n": .int(Int64(n)), "done": false])
            latencies.append(Date().timeIntervalSince(started))
        }
        print("bench-client: \(ops) local writes while offline: " + Percentiles(latencies).description)

        let drainStarted = Date()
        try await writer.sync(timeout: 300)
        let drained = Date().timeIntervalSince(drainStarted)
        let status = try await writer.status()
        print(String(format: "drain: %d ops pushed, applied and pulled back in %.2f s (%.0f ops/s); %d pending, %d set aside",
                     ops, drained, Double(ops) / drained, status.pendingOps, status.setAsideOps))

        // More records for the initial sync, pushed by the writer (500 per batch).
        if records > ops {
            for n in ops..<records {
                try await writer.upsert("notes", id: "n\(n)", data: ["title": .string("note \(n)"), "n": .int(Int64(n)), "done": false])
            }
            try await Self.syncThroughRateLimits(writer)
        }
        let reader = try client("reader")
        let syncStarted = Date()
        try await reader.sync(timeout: 600)
        let synced = Date().timeIntervalSince(syncStarted)
        let count = try await reader.records("notes").count
        print(String(format: "initial sync: %d records into an empty client in %.2f s (%.0f records/s)",
                     count, synced, Double(count) / synced))
        if count != max(records, ops) || status.pendingOps != 0 { throw ExitCode.failure }
    }

    /// Syncs until done, waiting as the server asks when a push is over its rate limit
    /// (filling the server with many records takes more pushes than the limit's burst).
    static func syncThroughRateLimits(_ client: SyncClient) async throws {
        let deadline = Date().addingTimeInterval(600)
        while true {
            do {
                return try await client.sync(timeout: 600)
            } catch ClientError.syncFailed(_, let retryAfter?) where Date() < deadline {
                try await Task.sleep(for: .seconds(retryAfter))
            }
        }
    }
}
