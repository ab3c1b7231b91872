import ArgumentParser
import Auth
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import PQBridge
import ServiceSupport
import SyncModels

/// The load generator: registers devices, pushes as fast as possible or at a fixed rate,
/// waits for every job, reports throughput and latencies, and checks the final state.
struct PushBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "push", abstract: "Benchmark pushes on a running stack (gateway + workers).")

    @Option(help: "Gateway base URL.") var url = "http://127.0.0.1:8080"
    @Option(help: "Users.") var users = 20
    @Option(help: "Devices per user.") var devices = 2
    @Option(help: "Ops per push.") var ops = 20
    @Option(help: "How long to push, e.g. 20s.") var duration = "20s"
    @Option(help: "Pushes per second in total; 0 pushes as fast as possible.") var rate = 0.0
    @Option(help: "Leading part of the run left out of the latency figures (connections, prepared statements and caches warm up).") var warmup = "2s"
    @Option(help: "Connections pushing in parallel (each waits for its answer before the next push).") var concurrency = 16
    @Flag(help: "Push each record as a call to the collection's hook (which must answer it with the record's upsert: scripts/bench-hook).")
    var calls = false

    struct Sample: Sendable {
        let jobID: String
        let user: String
        let seconds: Double
        let sentAt: Date
    }

    func run() async throws {
        let configuration = try Configuration.fromEnvironment()
        let signer = try await TokenMinter(secret: try configuration.requireJWTSecret())
        guard let seconds = Durations.parse(duration) else { throw ValidationError("bad --duration") }
        let run = UUID().uuidString.prefix(8).lowercased()
        let client = BenchClient(base: url)

        var clients: [(user: String, token: String, device: String)] = []
        for u in 0..<users {
            let user = "bench-\(run)-\(u)"
            let token = try await signer.sign(Claims(sub: user, exp: Int64(Date().timeIntervalSince1970) + 3600))
            for _ in 0..<devices { clients.append((user, token, try await client.registerDevice(token))) }
        }
        print("bench: \(users) users × \(devices) devices, \(ops) ops/push, \(rate > 0 ? "\(rate) pushes/s" : "as fast as possible (\(concurrency) in flight)") for \(duration)")

        let opsPerPush = ops, targets = clients, asCalls = calls
        guard let base = URL(string: url), let host = base.host else { throw ValidationError("bad --url") }
        let cpuBefore = Processes.cpuSeconds(Self.stackProcesses)
        let started = Date()
        let samples = try await LoadLanes.run(
            host: host, port: UInt16(base.port ?? 80), lanes: LoadLanes.lanes(for: rate, atLeast: concurrency), rate: rate,
            seconds: seconds
        ) { connection, index in
            let target = targets[index % targets.count]
            return try PushBench.push(
                connection, target.token, target.device, user: target.user, ops: opsPerPush, sequence: index, asCalls: asCalls)
        }
        let pushSeconds = Date().timeIntervalSince(started)
        let totalOps = samples.count * ops
        print(String(format: "pushed: %d pushes, %d ops in %.1f s → accepted %.0f ops/s", samples.count, totalOps, pushSeconds, Double(totalOps) / pushSeconds))
        guard let warmupSeconds = Durations.parse(warmup) else { throw ValidationError("bad --warmup") }
        let measured = samples.filter { $0.sentAt >= started.addingTimeInterval(warmupSeconds) }
        print("push HTTP latency (after \(warmup) warm-up): " + Percentiles(measured.map(\.seconds)).description)

        // Wait for every job, straight from the job rows.
        let pool = PGPool(url: configuration.databaseURL, size: 1, logger: Observability.bootstrap(service: "bench", level: .warning))
        let ids = samples.map(\.jobID)
        let unfinished = try await PushBench.waitForJobs(ids, pool: pool)
        let cpuAfter = Processes.cpuSeconds(Self.stackProcesses)
        let stats = try await pool.execute("""
            SELECT count(*) FILTER (WHERE status = \(JobStatus.succeeded)),
                   coalesce(extract(epoch FROM max(finished_at) - min(created_at))::float8, 0),
                   coalesce(array_agg(extract(epoch FROM finished_at - created_at)::float8)
                     FILTER (WHERE job_id = ANY(\(measured.map(\.jobID))::uuid[]) AND finished_at IS NOT NULL), '{}')
            FROM jobs WHERE job_id = ANY(\(ids)::uuid[])
            """).first
        await pool.shutdown()
        let (succeeded, span, latencies) = try stats?.decode((Int, Double, [Double]).self) ?? (0, 0, [])
        print(String(format: "applied: %d/%d jobs succeeded, %d ops in %.2f s → applied %.0f ops/s", succeeded, ids.count, totalOps, span, Double(totalOps) / max(span, 0.001)))
        print("push→applied latency (after \(warmup) warm-up): " + Percentiles(latencies).description)
        print("CPU per push (process CPU from the first push to the last job applied, ÷ pushes; this machine's processes): "
              + Self.cpuPerPush(before: cpuBefore, after: cpuAfter, pushes: ids.count))

        // Check the final state: every pushed record is there, once.
        var expected: [String: Int] = [:]
        for sample in samples { expected[sample.user, default: 0] += ops }
        var mismatches = 0
        for (user, count) in expected {
            let token = try await signer.sign(Claims(sub: user, exp: Int64(Date().timeIntervalSince1970) + 3600))
            let pulled = try PushBench.pullAll(RawHTTPConnection(host: host, port: UInt16(base.port ?? 80)), token: token).records
            if pulled != count { mismatches += 1; print("state mismatch for \(user): pulled \(pulled), expected \(count)") }
        }
        print(mismatches == 0 ? "state: every user's pull holds exactly the records pushed" : "state: \(mismatches) users differ")
        for line in Processes.memoryReport(["gateway", "worker"]) { print(line) }
        if unfinished > 0 || mismatches > 0 || succeeded != ids.count { throw ExitCode.failure }
    }
}

extension PushBench {
    /// The processes whose CPU a run is charged with (every worker together; PostgreSQL's
    /// backends together; RabbitMQ's Erlang VM).
    static let stackProcesses: Set<String> = ["gateway", "worker", "postgres", "beam.smp"]

    /// Each stack process's CPU between two readings, per push: "gateway 0.53 ms, …".
    static func cpuPerPush(before: [String: Double], after: [String: Double], pushes: Int) -> String {
        stackProcesses.sorted().compactMap { name -> String? in
            guard let spent = after[name] else { return nil }
            return String(format: "%@ %.2f ms", name, (spent - (before[name] ?? 0)) / Double(max(pushes, 1)) * 1000)
        }.joined(separator: ", ")
    }
}

struct Percentiles: CustomStringConvertible {
    let sorted: [Double]
    init(_ values: [Double]) { sorted = values.sorted() }
    func at(_ p: Double) -> Double {
        guard !sorted.isEmpty else { return 0 }
        return sorted[min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)]
    }
    var description: String {
        String(format: "p50 %.1f ms, p95 %.1f ms, p99 %.1f ms (n=%d)", at(0.5) * 1000, at(0.95) * 1000, at(0.99) * 1000, sorted.count)
    }
}

/// Running processes by name, from `/proc`.
enum Processes {
    /// The pids of running processes with one of these names, with the name.
    static func named(_ names: Set<String>) -> [(pid: String, name: String)] {
        ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap { pid in
            guard Int(pid) != nil,
                  let name = try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines),
                  names.contains(name)
            else { return nil }
            return (pid, name)
        }
    }

    /// CPU seconds (user + system) used so far, summed per name, with that of children
    /// that exited: a PostgreSQL backend that ends during the run moves its CPU into the
    /// postmaster's count instead of taking it out of the sum.
    static func cpuSeconds(_ names: Set<String>) -> [String: Double] {
        let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))
        var totals: [String: Double] = [:]
        for (pid, name) in named(names) {
            // After the name in parentheses: state is field 3; utime, stime, cutime and
            // cstime are 14 to 17.
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")")
            else { continue }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            guard fields.count > 14 else { continue }
            let ticks = fields[11...14].compactMap { Double($0) }.reduce(0, +)
            totals[name, default: 0] += ticks / ticksPerSecond
        }
        return totals
    }

    /// The resident kilobytes of the one process named `name`; nil unless exactly one runs.
    static func residentKilobytes(_ name: String) -> Int? {
        let found = named([name])
        guard found.count == 1, let status = try? String(contentsOfFile: "/proc/\(found[0].pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
        else { return nil }
        return Int(line.split(whereSeparator: { $0 == " " || $0 == "\t" })[1])
    }

    /// Resident and peak resident memory, one line per process.
    static func memoryReport(_ names: Set<String>) -> [String] {
        named(names).compactMap { pid, name -> String? in
            guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
            let fields = status.split(separator: "\n").filter { $0.hasPrefix("VmRSS") || $0.hasPrefix("VmHWM") }
                .map { $0.split(whereSeparator: { $0 == " " || $0 == "\t" }).joined(separator: " ") }
            return "memory \(name) pid \(pid): \(fields.joined(separator: ", "))"
        }.sorted()
    }
}

extension PushBench {
    /// Pulls from the start until `has_more` is false, `limit` records a page, and checks
    /// every page. Answers the records, pages and bytes.
    static func pullAll(_ connection: RawHTTPConnection, token: String, limit: Int = 1000) throws -> (records: Int, pages: Int, bytes: Int) {
        let pages = try fetchPages(connection, token: token, limit: limit)
        return (try countRecords(pages), pages.count, pages.reduce(0) { $0 + $1.count })
    }

    /// The pages of a full pull as they arrived. Each page's cursor and `has_more` are read
    /// from its end (they are its last two fields), so the reader asks for the next page
    /// without parsing the records first: a pull's time is the server's, as the floor's
    /// is `COPY`'s. `countRecords` checks the pages afterwards.
    static func fetchPages(_ connection: RawHTTPConnection, token: String, limit: Int, form: PullForm = .full) throws -> [[UInt8]] {
        var cursor = "0", pages: [[UInt8]] = []
        while true {
            let (status, body) = try connection.send(
                method: "GET", path: "/v1/sync/pull?limit=\(limit)&since=\(cursor)&form=\(form.rawValue)", token: token)
            guard status == 200, let end = pageEnd(body) else { throw ValidationError("pull answered \(status)") }
            pages.append(body)
            cursor = end.cursor
            if !end.hasMore { return pages }
        }
    }

    /// A page's cursor and `has_more`, read from `…],"cursor":"42","has_more":true}`.
    static func pageEnd(_ body: [UInt8]) -> (cursor: String, hasMore: Bool)? {
        let tail = String(decoding: body.suffix(64), as: UTF8.self)
        guard let key = tail.range(of: #"],"cursor":""#, options: .backwards),
              let close = tail[key.upperBound...].firstIndex(of: "\"")
        else { return nil }
        let rest = tail[tail.index(after: close)...]
        guard rest == #","has_more":true}"# || rest == #","has_more":false}"# else { return nil }
        return (String(tail[key.upperBound..<close]), rest.contains("true"))
    }

    /// Parses every page of a pull, checks that each names the cursor and `has_more` its
    /// end was read as and that each cursor follows on, and answers the records.
    static func countRecords(_ pages: [[UInt8]]) throws -> Int {
        var records = 0
        for (index, body) in pages.enumerated() {
            guard let page = (try? JSONParser.parse(body))?.objectValue, let changes = page["changes"]?.arrayValue,
                  let end = pageEnd(body), page["cursor"]?.stringValue == end.cursor,
                  page["has_more"]?.boolValue == end.hasMore, end.hasMore == (index < pages.count - 1)
            else { throw ValidationError("page \(index + 1) of a pull is not a valid page") }
            records += changes.count
        }
        return records
    }

    /// Waits up to five minutes for the jobs to finish; answers how many did not.
    static func waitForJobs(_ ids: [String], pool: PGPool) async throws -> Int {
        let deadline = Date().addingTimeInterval(300)
        var unfinished = ids.count
        while Date() < deadline {
            unfinished = try await pool.execute("""
                SELECT count(*) FROM jobs WHERE job_id = ANY(\(ids)::uuid[]) AND status = ANY(\(JobStatus.unfinished.map(\.rawValue)))
                """).first?.decode(Int.self, at: 0) ?? 0
            if unfinished == 0 { break }
            try await Task.sleep(for: .milliseconds(250))
        }
        return unfinished
    }

    static func push(
        _ connection: RawHTTPConnection, _ token: String, _ device: String, user: String, ops: Int, sequence: Int, space: String? = nil,
        asCalls: Bool = false
    ) throws -> Sample {
        let list = (0..<ops).map { index -> String in
            let record = #"{"title":"item \#(index)","done":false,"n":\#(index)}"#
            let op = asCalls ? #""type":"call","name":"save","args":\#(record)"# : #""type":"upsert","data":\#(record)"#
            return #"{"op_id":"\#(UUID().uuidString.lowercased())",\#(op),"collection":"bench","id":"p\#(sequence)-\#(index)"}"#
        }.joined(separator: ",")
        let scope = space.map { #","space_id":"\#($0)""# } ?? ""
        let body = Array(#"{"device_id":"\#(device)"\#(scope),"ops":[\#(list)]}"#.utf8)
        let start = Date()
        let (status, response) = try connection.send(method: "POST", path: "/v1/sync/push", token: token, body: body)
        let elapsed = Date().timeIntervalSince(start)
        guard status == 202, let jobID = (try? JSONParser.parse(response))?.objectValue?["job_id"]?.stringValue else {
            throw ValidationError("push answered \(status): \(String(decoding: response, as: UTF8.self))")
        }
        return Sample(jobID: jobID, user: user, seconds: elapsed, sentAt: start)
    }
}

struct BenchClient: Sendable {
    let base: String
    let session: URLSession = {
        let configuration = URLSessionConfiguration.default
        configuration.httpMaximumConnectionsPerHost = 64
        return URLSession(configuration: configuration)
    }()

    func send(_ method: String, _ path: String, token: String, body: Data?) async throws -> (Int, Data) {
        var request = URLRequest(url: URL(string: base + path)!)
        request.httpMethod = method
        request.httpBody = body
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        let (data, response) = try await session.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, data)
    }

    func registerDevice(_ token: String) async throws -> String {
        let (status, data) = try await send("POST", "/v1/devices", token: token, body: Data(#"{"name":"bench","platform":"bench"}"#.utf8))
        guard status == 201, let device = try? JSONDecoder().decode([String: String?].self, from: data)["device_id"] ?? nil else {
            throw ValidationError("device registration answered \(status)")
        }
        return device
    }

    /// A JSON answer's string field, when the status is `expected`.
    func field(_ name: String, _ method: String, _ path: String, token: String, body: String?, expected: Int) async throws -> String {
        let (status, data) = try await send(method, path, token: token, body: body.map { Data($0.utf8) })
        guard status == expected, let value = (try? JSONParser.parse(data))?.objectValue?[name]?.stringValue else {
            throw ValidationError("\(method) \(path) answered \(status)")
        }
        return value
    }

}
