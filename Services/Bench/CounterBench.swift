import ArgumentParser
import Auth
import Foundation
import PQBridge
import Persistence
import ServiceSupport
import SyncModels

/// A hot counter: devices of one user increment one record as fast as they can. Reports
/// the increments applied per second, checks the counter holds exactly what was pushed, and
/// the record's stored size before and after a purge settles its increments (the jobs'
/// retention set to 0 for that purge).
struct CounterBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "counter", abstract: "Benchmark one hot counter incremented by many devices at full speed, and its stored size.")

    @Option(help: "Gateway base URL.") var url = "http://127.0.0.1:8080"
    @Option(help: "Devices incrementing, each on its own connection.") var devices = 20
    @Option(help: "Increments in all.") var increments = 100_000
    @Option(help: "Increments per push.") var ops = 1
    @Option(help: "Give up after this long, e.g. 600s.") var duration = "600s"
    @Flag(help: "Patch the field to the push's sequence number instead (last writer wins): the same load without merging, to compare.")
    var patches = false

    func run() async throws {
        let configuration = try Configuration.fromEnvironment()
        let signer = try await TokenMinter(secret: try configuration.requireJWTSecret())
        guard let seconds = Durations.parse(duration), let base = URL(string: url), let host = base.host else {
            throw ValidationError("bad --duration or --url")
        }
        let run = UUID().uuidString.prefix(8).lowercased()
        let user = "counter-\(run)", record = "hot-\(run)"
        let token = try await signer.sign(Claims(sub: user, exp: Int64(Date().timeIntervalSince1970) + 7200))
        let client = BenchClient(base: url)
        var deviceIDs: [String] = []
        for _ in 0..<devices { deviceIDs.append(try await client.registerDevice(token)) }
        let pool = PGPool(url: configuration.databaseURL, size: 1, logger: Observability.bootstrap(service: "bench", level: .warning))
        let port = UInt16(base.port ?? 80)

        let created = try Self.push(RawHTTPConnection(host: host, port: port), token, deviceIDs[0], [#""type":"upsert","data":{"n":0}"#], record)
        _ = try await PushBench.waitForJobs([created], pool: pool)
        print("bench: \(devices) devices of one user \(patches ? "patching" : "incrementing") one record, \(ops) op(s) a push, \(increments) in all")

        let perPush = ops, targets = deviceIDs, patching = patches
        let cpuBefore = Processes.cpuSeconds(PushBench.stackProcesses)
        let started = Date()
        let jobs = try await LoadLanes.run(host: host, port: port, lanes: devices, rate: 0, seconds: seconds, total: increments / ops) { connection, index in
            let op = patching ? #""type":"patch","data":{"n":\#(index)}"# : #""type":"increment","field":"n","by":1"#
            return try Self.push(connection, token, targets[index % targets.count], Array(repeating: op, count: perPush), record)
        }
        let pushSeconds = Date().timeIntervalSince(started)
        let unfinished = try await PushBench.waitForJobs(jobs, pool: pool)
        let cpuAfter = Processes.cpuSeconds(PushBench.stackProcesses)
        let span = try await pool.execute("""
            SELECT coalesce(extract(epoch FROM max(finished_at) - min(created_at))::float8, 0) FROM jobs WHERE job_id = ANY(\(jobs)::uuid[])
            """).first?.decode(Double.self, at: 0) ?? 0
        let pushed = jobs.count * ops
        print(String(format: "pushed: %d increments in %d pushes in %.1f s; applied %.0f increments/s (first push to last job applied: %.2f s)",
                     pushed, jobs.count, pushSeconds, Double(pushed) / max(span, 0.001), span))
        print("CPU per push: " + PushBench.cpuPerPush(before: cpuBefore, after: cpuAfter, pushes: jobs.count))

        let value = try await Self.stored(pool, record)
        print("counter: \(value.count) (expected \(pushed)); stored row \(value.row) bytes, merge state \(value.merge) bytes")
        let report = try await PurgeStore(pool: pool).run(.init(
            tombstones: 30 * 86_400, jobs: 0, deadLetters: 30 * 86_400, devices: 90 * 86_400, publicIDReservation: 30 * 86_400, blobs: 7 * 86_400))
        let settled = try await Self.stored(pool, record)
        print("after purge (jobs' retention 0: \(report.map(\.description) ?? "another purge held the lock")): \(settled.count); stored row \(settled.row) bytes, merge state \(settled.merge) bytes")
        await pool.shutdown()
        if unfinished > 0 || (!patches && (value.count != pushed || settled.count != pushed)) { throw ExitCode.failure }
    }

    /// Pushes `ops` (each without its op id, collection and id) to the record; returns the job id.
    static func push(_ connection: RawHTTPConnection, _ token: String, _ device: String, _ ops: [String], _ record: String) throws -> String {
        let list = ops.map { #"{"op_id":"\#(UUID().uuidString.lowercased())",\#($0),"collection":"counters","id":"\#(record)"}"# }
        let body = Array(#"{"device_id":"\#(device)","ops":[\#(list.joined(separator: ","))]}"#.utf8)
        let (status, response) = try connection.send(method: "POST", path: "/v1/sync/push", token: token, body: body)
        guard status == 202, let jobID = (try? JSONParser.parse(response))?.objectValue?["job_id"]?.stringValue else {
            throw ValidationError("push answered \(status): \(String(decoding: response, as: UTF8.self))")
        }
        return jobID
    }

    /// The counter's value, its row's stored size and its merge state's.
    static func stored(_ pool: PGPool, _ record: String) async throws -> (count: Int, row: Int, merge: Int) {
        guard let row = try await pool.execute("""
            SELECT (data->>'n')::bigint, pg_column_size(r.*), coalesce(pg_column_size(merge_state), 0)
            FROM records r WHERE collection = 'counters' AND record_id = \(record)
            """).first else { throw ValidationError("the counter's record is missing") }
        return try row.decode((Int, Int, Int).self)
    }
}
