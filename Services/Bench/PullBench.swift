import ArgumentParser
import Auth
import Foundation
import Logging
import PQBridge
import ServiceSupport
import SyncModels

/// Full pulls of one user's records through the gateway: pushes `--records` records of
/// about `--record-bytes` each once (500 per push), then pulls them all from the start,
/// 1,000 per page, `--runs` times with `--clients` pulling at once, and reports records/s
/// and the gateway's resident memory.
struct PullBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pull", abstract: "Benchmark full pulls (records/s, gateway memory).")

    @Option(help: "Gateway base URL.") var url = "http://127.0.0.1:8080"
    @Option(help: "Records to pull.") var records = 100_000
    @Option(help: "Approximate bytes of data per record.") var recordBytes = 100
    @Option(help: "Full pulls per client.") var runs = 3
    @Option(help: "Clients pulling at once.") var clients = 1

    func run() async throws {
        let configuration = try Configuration.fromEnvironment()
        let signer = try await TokenMinter(secret: try configuration.requireJWTSecret())
        guard let gateway = URL(string: url), let host = gateway.host else { throw ValidationError("bad --url") }
        let port = UInt16(gateway.port ?? 80)
        let run = UUID().uuidString.prefix(8).lowercased()
        let user = "pbench-\(run)"
        let token = try await signer.sign(Claims(sub: user, exp: Int64(Date().timeIntervalSince1970) + 3600))
        let device = try await BenchClient(base: url).registerDevice(token)

        // Seed: 500 records per push; ops past the 1 MiB body limit go in smaller pushes.
        let padding = String(repeating: "x", count: max(0, recordBytes - 40))
        let perPush = max(1, min(500, 900_000 / max(1, recordBytes)))
        let seeder = RawHTTPConnection(host: host, port: port)
        var jobs: [String] = []
        var written = 0
        let seeded = Date()
        while written < records {
            let count = min(perPush, records - written)
            let ops = (written..<written + count).map { n in
                #"{"op_id":"\#(UUID().uuidString.lowercased())","type":"upsert","collection":"pull","id":"r\#(n)","data":{"n":\#(n),"pad":"\#(padding)"}}"#
            }.joined(separator: ",")
            let (status, body) = try seeder.send(
                method: "POST", path: "/v1/sync/push", token: token, body: Array(#"{"device_id":"\#(device)","ops":[\#(ops)]}"#.utf8))
            guard status == 202, let job = (try? JSONParser.parse(body))?.objectValue?["job_id"]?.stringValue else {
                throw ValidationError("push answered \(status): \(String(decoding: body.prefix(300), as: UTF8.self))")
            }
            jobs.append(job)
            written += count
        }
        let pool = PGPool(url: configuration.databaseURL, size: 1, logger: Logger(label: "bench"))
        let unfinished = try await PushBench.waitForJobs(jobs, pool: pool)
        await pool.shutdown()
        guard unfinished == 0 else { throw ValidationError("\(unfinished) seeding jobs did not finish") }
        print(String(format: "bench-pull: %d records of about %d bytes seeded in %.1f s", records, recordBytes, Date().timeIntervalSince(seeded)))
        for line in Processes.memoryReport(["gateway"]) { print("before: " + line) }

        for round in 1...runs {
            let cpuBefore = Processes.cpuSeconds(["gateway", "postgres"])
            let started = Date()
            let results = try await withThrowingTaskGroup(of: (Int, Int, Int).self) { group in
                for _ in 0..<clients {
                    group.addTask {
                        try PushBench.pullAll(RawHTTPConnection(host: host, port: port), token: token)
                    }
                }
                return try await group.reduce(into: [(Int, Int, Int)]()) { $0.append($1) }
            }
            let seconds = Date().timeIntervalSince(started)
            let pulled = results.map(\.0).reduce(0, +), pages = results.map(\.1).reduce(0, +), bytes = results.map(\.2).reduce(0, +)
            guard results.allSatisfy({ $0.0 == records }) else {
                throw ValidationError("a full pull returned \(results.map(\.0)) records, not \(records)")
            }
            let cpuAfter = Processes.cpuSeconds(["gateway", "postgres"])
            func perPage(_ name: String) -> Double { ((cpuAfter[name] ?? 0) - (cpuBefore[name] ?? 0)) * 1000 / Double(pages) }
            print(String(
                format: "run %d: %d clients pulled %d records in %d pages (%.1f MB) in %.2f s → %.0f records/s; CPU per page: gateway %.1f ms, PostgreSQL %.1f ms",
                round, clients, pulled, pages, Double(bytes) / 1e6, seconds, Double(pulled) / seconds, perPage("gateway"),
                perPage("postgres")))
        }
        for line in Processes.memoryReport(["gateway"]) { print("after: " + line) }
    }
}
