import ArgumentParser
import Auth
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Logging
import PQBridge
import ServiceSupport
import SyncModels

/// Full pulls of one user's records through the gateway: pushes `--records` records of
/// about `--record-bytes` each once (500 per push), then pulls them all from the start,
/// `--limit` per page, `--runs` times with `--clients` pulling at once, and reports
/// records/s and the gateway's resident memory. The clock stops when the last page has
/// arrived; the pages are parsed and checked after it. After each round, the floor:
/// PostgreSQL handing over the same rows, with the fields a page carries, as JSON
/// (`COPY … TO STDOUT` through `psql`, in one statement), timed the same way, with the
/// pull's ratio to it.
struct PullBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pull", abstract: "Benchmark full pulls (records/s, gateway memory).")

    @Option(help: "Gateway base URL.") var url = "http://127.0.0.1:8080"
    @Option(help: "Records to pull.") var records = 100_000
    @Option(help: "Approximate bytes of data per record.") var recordBytes = 100
    @Option(help: "Full pulls per client.") var runs = 3
    @Option(help: "Clients pulling at once.") var clients = 1
    @Option(help: "Records per page (the pull's limit, 1–10,000).") var limit = 1000
    @Option(help: "The pages' form: full or compact.") var form = "full"
    @Option(help: "How pages are read: raw (this tool's HTTP/1.1, parsed after the clock) or foundation (URLSession, which asks for gzip, and JSONDecoder, inside the clock).")
    var reader = "raw"

    func run() async throws {
        guard let form = PullForm(rawValue: form) else { throw ValidationError("--form is full or compact") }
        guard ["raw", "foundation"].contains(reader) else { throw ValidationError("--reader is raw or foundation") }
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
        // Every round reads the same settled table: its rows' hint bits set and its
        // statistics current, not left to whichever round autovacuum happens to meet.
        _ = try Self.psql(databaseURL: configuration.databaseURL, "VACUUM (ANALYZE) records")
        for line in Processes.memoryReport(["gateway"]) { print("before: " + line) }

        for round in 1...runs {
            let cpuBefore = Processes.cpuSeconds(["gateway", "postgres"])
            let started = Date()
            let fetched = try await withThrowingTaskGroup(of: [[UInt8]].self) { group in
                for _ in 0..<clients {
                    group.addTask { [limit, reader, url] in
                        if reader == "foundation" {
                            return try await Self.decodePages(base: url, token: token, limit: limit, form: form)
                        }
                        return try PushBench.fetchPages(RawHTTPConnection(host: host, port: port), token: token, limit: limit, form: form)
                    }
                }
                return try await group.reduce(into: [[[UInt8]]]()) { $0.append($1) }
            }
            let seconds = Date().timeIntervalSince(started)
            let results = try fetched.map { pages in
                (try PushBench.countRecords(pages), pages.count, pages.reduce(0) { $0 + $1.count })
            }
            let pulled = results.map(\.0).reduce(0, +), pages = results.map(\.1).reduce(0, +), bytes = results.map(\.2).reduce(0, +)
            guard results.allSatisfy({ $0.0 == records }) else {
                throw ValidationError("a full pull returned \(results.map(\.0)) records, not \(records)")
            }
            let cpuAfter = Processes.cpuSeconds(["gateway", "postgres"])
            func perThousand(_ name: String) -> Double { ((cpuAfter[name] ?? 0) - (cpuBefore[name] ?? 0)) * 1e6 / Double(pulled) }
            print(String(
                format: "run %d: %d clients pulled %d records in %d pages (%.1f MB) in %.2f s → %.0f records/s; CPU per 1,000 records: gateway %.1f ms, PostgreSQL %.1f ms",
                round, clients, pulled, pages, Double(bytes) / 1e6, seconds, Double(pulled) / seconds, perThousand("gateway"),
                perThousand("postgres")))
            let floor = try Self.copyFloor(databaseURL: configuration.databaseURL, user: user)
            print(String(
                format: "run %d floor: COPY of the same %d rows as JSON in %.2f s (%.1f MB) → %.0f records/s; one pull ÷ floor %.2f",
                round, floor.rows, floor.seconds, Double(floor.bytes) / 1e6, Double(floor.rows) / floor.seconds,
                seconds / Double(clients) / floor.seconds))
        }
        for line in Processes.memoryReport(["gateway"]) { print("after: " + line) }
    }

    /// A full pull as an app on URLSession reads it: each page fetched (URLSession asks for
    /// gzip and decompresses) and decoded by JSONDecoder into plain structures, inside the
    /// clock. Answers the pages' JSON, checked after the clock as the raw reader's are.
    static func decodePages(base: String, token: String, limit: Int, form: PullForm) async throws -> [[UInt8]] {
        struct Page: Decodable {
            let changes: [Change]
            let cursor: String
            let has_more: Bool
        }
        struct Change: Decodable {
            let collection: String, id: String, version: Int64, deleted: Bool?, data: [String: JSONValue]?, hlc: String?
            let updated_at: String?, updated_by: String?, visibility: String?, public_id: String?, can_fork: Bool?
            let published_at: String?, forked_from: String?
        }
        let session = URLSession(configuration: .ephemeral)
        var cursor = "0", pages: [[UInt8]] = []
        let decoder = JSONDecoder()
        while true {
            var request = URLRequest(url: URL(string: "\(base)/v1/sync/pull?limit=\(limit)&since=\(cursor)&form=\(form.rawValue)")!)
            request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
            let (data, response) = try await session.data(for: request)
            guard (response as? HTTPURLResponse)?.statusCode == 200 else { throw ValidationError("pull answered \(response)") }
            let page = try decoder.decode(Page.self, from: data)
            pages.append(Array(data))
            cursor = page.cursor
            if !page.has_more { return pages }
        }
    }

    /// The floor of a full pull: the user's records, the fields a page carries, in version
    /// order, as one JSON object per row, read by `psql` with `COPY … TO STDOUT`. Returns
    /// the rows, bytes and seconds.
    static func copyFloor(databaseURL: String, user: String) throws -> (rows: Int, bytes: Int, seconds: Double) {
        let query = """
            COPY (SELECT row_to_json(r) FROM (
              SELECT collection, record_id AS id, version, deleted, data, updated_at, updated_by,
                     write_clock, greatest(delete_clock COLLATE "C", visibility_clock) AS other_clock, visibility, public_id,
                     can_fork, published_at, forked_from
              FROM records
              WHERE space_id = (SELECT space_id FROM spaces WHERE personal_of = '\(user)')
                AND (write_clock IS NOT NULL OR delete_clock IS NOT NULL)
              ORDER BY version) r) TO STDOUT
            """
        let started = Date()
        let text = try psql(databaseURL: databaseURL, query)
        let seconds = Date().timeIntervalSince(started)
        return (text.reduce(0) { $0 + ($1 == UInt8(ascii: "\n") ? 1 : 0) }, text.count, seconds)
    }

    /// Runs one statement through `psql` and answers what it wrote.
    static func psql(databaseURL: String, _ statement: String) throws -> Data {
        let psql = Process()
        psql.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        psql.arguments = ["psql", "--no-psqlrc", "--quiet", databaseURL, "--command", statement]
        let output = Pipe()
        psql.standardOutput = output
        try psql.run()
        let text = try output.fileHandleForReading.readToEnd() ?? Data()
        psql.waitUntilExit()
        guard psql.terminationStatus == 0 else { throw ValidationError("psql exited with \(psql.terminationStatus)") }
        return text
    }
}
