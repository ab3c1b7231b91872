import ArgumentParser
import Auth
import Foundation
import PQBridge
import Persistence
import ServiceSupport
import SyncModels

/// Discover and public reads under load: publishes N records with tags, descriptions and
/// languages (once; later runs reuse them), then measures, each at a fixed rate, listing
/// by tag, full-text search, and record reads (each read counts a view).
struct PublicBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "public",
        abstract: "Benchmark Discover (tag, search) and public reads over many published records (gateway + workers).")

    @Option(help: "Gateway base URL.") var url = "http://127.0.0.1:8080"
    @Option(help: "Published records to have.") var records = 100_000
    @Option(help: "Listings (newest, and by tag) per second.") var tagRate = 100.0
    @Option(help: "Searches per second.") var searchRate = 100.0
    @Option(help: "Record reads per second.") var readRate = 500.0
    @Option(help: "How long each phase runs, e.g. 20s.") var duration = "20s"
    @Option(help: "Leading part of each phase left out of the latency figures.") var warmup = "2s"

    static let recordsPerUser = 1_000
    static let recordsPerPush = 250  // an upsert and a publish each: 500 ops
    static let tags = 200
    static let words = 2_000

    struct Sample: Sendable {
        let status: Int
        let seconds: Double
        let items: Int
        let sentAt: Date
    }

    func run() async throws {
        let configuration = try Configuration.fromEnvironment()
        guard let seconds = Durations.parse(duration), let warmupSeconds = Durations.parse(warmup) else {
            throw ValidationError("bad --duration or --warmup")
        }
        guard let base = URL(string: url), let host = base.host else { throw ValidationError("bad --url") }
        let port = UInt16(base.port ?? 80)
        try await populate(configuration, host: host, port: port)
        try await showPlans(configuration)

        let count = records
        let phases: [(name: String, rate: Double, path: @Sendable (Int) -> String)] = [
            ("list newest (limit 20)", tagRate, { _ in "/v1/public?limit=20" }),
            ("list by tag (limit 20)", tagRate, { i in "/v1/public?tag=\(Self.tag(Self.mix(i, 1) % Self.tags))&limit=20" }),
            ("search one word (limit 20)", searchRate, { i in "/v1/public?q=\(Self.word(Self.mix(i, 2) % Self.words))&limit=20" }),
            ("read a record", readRate, { i in "/v1/public/\(Self.publicID(Self.mix(i, 3) % count))" }),
        ]
        var failed = false
        for phase in phases {
            let started = Date()
            let samples = try await LoadLanes.run(
                host: host, port: port, lanes: LoadLanes.lanes(for: phase.rate, atLeast: 4), rate: phase.rate, seconds: seconds
            ) { connection, index in
                let start = Date()
                let (status, body) = try connection.send(method: "GET", path: phase.path(index), token: nil)
                let elapsed = Date().timeIntervalSince(start)
                let items = (try? JSONParser.parse(body))?.objectValue?["items"]?.arrayValue?.count ?? 1
                return Sample(status: status, seconds: elapsed, items: items, sentAt: start)
            }
            let measured = samples.filter { $0.sentAt >= started.addingTimeInterval(warmupSeconds) }
            let errors = samples.filter { $0.status != 200 }.count
            let items = Double(samples.map(\.items).reduce(0, +)) / Double(max(samples.count, 1))
            print(String(format: "%@ at %.0f/s: %d requests, %d not 200, %.1f items each; latency (after %@): %@",
                         phase.name, phase.rate, samples.count, errors, items, warmup, Percentiles(measured.map(\.seconds)).description))
            if errors > 0 { failed = true }
        }
        for line in Processes.memoryReport(["gateway"]) { print(line) }
        if failed { throw ExitCode.failure }
    }

    /// Which index PostgreSQL uses for a tag listing and a search.
    func showPlans(_ configuration: Configuration) async throws {
        let pool = PGPool(url: configuration.databaseURL, size: 1, logger: Observability.bootstrap(service: "bench", level: .warning))
        let store = PublicStore(pool: pool)
        for (name, filter) in [
            ("newest", PublicStore.Filter()), ("tag", PublicStore.Filter(tag: Self.tag(7))),
            ("search", PublicStore.Filter(query: Self.word(7))),
        ] {
            let plan = try await store.plan(filter, limit: 20)
            print("plan (\(name)): " + plan.map { $0.trimmingCharacters(in: .whitespaces) }.joined(separator: " | "))
        }
        await pool.shutdown()
    }

    /// How many of the benchmark's records are published.
    static func publishedCount(_ pool: PGPool) async throws -> Int {
        try await pool.execute("""
            SELECT count(*) FROM records
            WHERE visibility = \(RecordState.PublicVisibility.public) AND public_id LIKE 'pbench-%'
            """).first?.decode(Int.self, at: 0) ?? 0
    }

    /// Publishes the records that are missing, 250 per push, 1,000 per user.
    func populate(_ configuration: Configuration, host: String, port: UInt16) async throws {
        let pool = PGPool(url: configuration.databaseURL, size: 1, logger: Observability.bootstrap(service: "bench", level: .warning))
        let existing = try await Self.publishedCount(pool)
        guard existing < records else {
            print("bench-public: \(existing) published records already there")
            await pool.shutdown()
            return
        }
        let signer = try await TokenMinter(secret: try configuration.requireJWTSecret())
        let client = BenchClient(base: url)
        var users: [(token: String, device: String)] = []
        for u in 0..<((records + Self.recordsPerUser - 1) / Self.recordsPerUser) {
            let token = try await signer.sign(Claims(
                sub: "pbench-user-\(u)", exp: Int64(Date().timeIntervalSince1970) + 3600, name: "Sailor \(u)"))
            users.append((token, try await client.registerDevice(token)))
        }
        let count = records, pushes = (records + Self.recordsPerPush - 1) / Self.recordsPerPush, pushers = users
        print("bench-public: publishing \(records) records (\(pushes) pushes of \(Self.recordsPerPush * 2) ops)")
        let started = Date()
        let jobs = try await LoadLanes.run(host: host, port: port, lanes: 8, rate: 0, seconds: 3600, total: pushes) { connection, push in
            let first = push * Self.recordsPerPush
            let numbers = first..<min(first + Self.recordsPerPush, count)
            let user = pushers[first / Self.recordsPerUser]
            let ops = numbers.map(Self.ops).joined(separator: ",")
            let body = Array(#"{"device_id":"\#(user.device)","ops":[\#(ops)]}"#.utf8)
            let (status, response) = try connection.send(method: "POST", path: "/v1/sync/push", token: user.token, body: body)
            guard status == 202, let jobID = (try? JSONParser.parse(response))?.objectValue?["job_id"]?.stringValue else {
                throw ValidationError("push answered \(status): \(String(decoding: response, as: UTF8.self))")
            }
            return jobID
        }
        let unfinished = try await PushBench.waitForJobs(jobs, pool: pool)
        let published = try await Self.publishedCount(pool)
        await pool.shutdown()
        print(String(format: "bench-public: %d published in %.1f s", published, Date().timeIntervalSince(started)))
        if unfinished > 0 || published < records { throw ValidationError("\(unfinished) jobs unfinished, \(published) published") }
    }

    /// Record n: an upsert with title, description, tags and language, and its publish.
    static func ops(_ n: Int) -> String {
        let title = "Checklist \(n) \(word(mix(n, 10) % words)) \(word(mix(n, 11) % words))"
        let description = (0..<8).map { word(mix(n, 20 + $0) % words) }.joined(separator: " ")
        let tagList = Set([n % tags, (n * 7 + 3) % tags, (n * 13 + 5) % tags]).sorted().map { "\"\(tag($0))\"" }
        let language = ["en", "fr", "de", "es", "nl"][n % 5]
        let upsert = #"{"op_id":"\#(UUID().uuidString.lowercased())","type":"upsert","collection":"checklists","id":"c\#(n)","data":{"title":"\#(title)","description":"\#(description)","tags":[\#(tagList.joined(separator: ","))],"language":"\#(language)","items":["life jackets","flares","radio check"]}}"#
        let publish = #"{"op_id":"\#(UUID().uuidString.lowercased())","type":"publish","collection":"checklists","id":"c\#(n)","public_id":"\#(publicID(n))"}"#
        return upsert + "," + publish
    }

    static func publicID(_ n: Int) -> String { "pbench-\(n)" }
    static func tag(_ k: Int) -> String { "tag\(k)" }
    static func word(_ k: Int) -> String { "w\(k)" }

    /// A well-spread deterministic number for (n, salt).
    static func mix(_ n: Int, _ salt: Int) -> Int {
        var z = UInt64(truncatingIfNeeded: n) &* 0x9E37_79B9_7F4A_7C15 &+ UInt64(salt) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return Int(truncatingIfNeeded: (z ^ (z >> 31)) >> 1)
    }
}
