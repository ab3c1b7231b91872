import ArgumentParser
import Auth
import Foundation
import PQBridge
import Persistence
import ServiceSupport
import SyncModels

/// The support console over a big space: one user's personal space filled straight in
/// PostgreSQL with `--records` records (nine in ten in `tasks`, the rest in `notes`, one in
/// fifty deleted) and `--jobs` one-op jobs naming them, then each console read asked
/// `--runs` times through the gateway with an admin token that has the support scope.
/// Reports each read's first time (cold), then the median and 95th percentile of the rest. The seeded rows stay (the user is new each
/// run): use a database made for benchmarks.
struct SupportBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "support", abstract: "Benchmark the support console's reads over a space of many records.")

    @Option(help: "Gateway base URL.") var url = "http://127.0.0.1:8080"
    @Option(help: "Records in the space.") var records = 1_000_000
    @Option(help: "Jobs naming its records.") var jobs = 100_000
    @Option(help: "Times each read is asked (at least 2).") var runs = 20

    func run() async throws {
        let configuration = try Configuration.fromEnvironment()
        let signer = try await TokenMinter(secret: try configuration.requireJWTSecret())
        guard let base = URL(string: url), let host = base.host, runs >= 2 else { throw ValidationError("bad --url or --runs") }
        let http = RawHTTPConnection(host: host, port: UInt16(base.port ?? 80))
        let run = UUID().uuidString.prefix(8).lowercased()
        let user = "support-\(run)"
        let expires = Int64(Date().timeIntervalSince1970) + 7200
        let token = try await signer.sign(Claims(sub: user, exp: expires))
        let admin = try await signer.sign(Claims(sub: "bench-support", exp: expires, role: "admin", scope: "support"))
        let device = try await BenchClient(base: url).registerDevice(token)
        let pool = PGPool(url: configuration.databaseURL, size: 1, logger: Observability.bootstrap(service: "bench", level: .warning))
        defer { Task { [pool] in await pool.shutdown() } }

        // A first write makes the personal space; a pull that names the device marks its cursor.
        let first = #"{"device_id":"\#(device)","ops":[{"op_id":"\#(UUID().uuidString.lowercased())","type":"upsert","collection":"tasks","id":"first","data":{"title":"first"}}]}"#
        let (status, body) = try http.send(method: "POST", path: "/v1/sync/push", token: token, body: Array(first.utf8))
        guard status == 202, let job = (try? JSONParser.parse(Data(body)))?.objectValue?["job_id"]?.stringValue else {
            throw ValidationError("the first push answered \(status)")
        }
        _ = try await PushBench.waitForJobs([job], pool: pool)
        _ = try http.send(method: "GET", path: "/v1/sync/pull?device_id=\(device)", token: token)
        guard let space = try await pool.execute("SELECT space_id FROM spaces WHERE personal_of = \(user)").first?.decode(String.self, at: 0),
              let spaceID = SpaceID(space)
        else { throw ValidationError("no personal space was made") }

        let seeding = Date()
        try await pool.execute("""
            INSERT INTO records (space_id, collection, record_id, version, deleted, data, write_clock, created_by, changed_by)
            SELECT \(spaceID), CASE WHEN i % 10 = 0 THEN 'notes' ELSE 'tasks' END, 'r' || i, i + 1, i % 50 = 0,
                   jsonb_build_object('title', 'task ' || i, 'done', i % 3 = 0),
                   lpad((1700000000000 + i)::text, 13, '0') || '-00000-' || \(device) || ' ' || gen_random_uuid(), \(user), \(user)
            FROM generate_series(1, \(records)) i
            """)
        try await pool.execute("UPDATE space_counters SET counter = \(Int64(records + 1)) WHERE space_id = \(spaceID)")
        try await pool.execute("""
            INSERT INTO jobs (job_id, user_id, device_id, space_id, status, ops, op_count, results, trace_id, finished_at)
            SELECT gen_random_uuid(), \(user), \(DeviceID(device)), \(spaceID), 'succeeded',
                   jsonb_build_array(jsonb_build_object('op_id', gen_random_uuid(), 'type', 'patch', 'collection', 'tasks',
                     'id', 'r' || (j * 7919 % \(records) + 1), 'data', jsonb_build_object('done', true))),
                   1, '[{"status":"superseded"}]', '00-' || md5(\(run) || j) || '-00f067aa0ba902b7-01', now()
            FROM generate_series(1, \(jobs)) j
            """)
        try await pool.execute("""
            INSERT INTO job_records (space_id, job_id, records)
            SELECT space_id, job_id, ARRAY[space_id || '/' || (ops -> 0 ->> 'collection') || '/' || (ops -> 0 ->> 'id')]
            FROM jobs WHERE space_id = \(spaceID)
            ON CONFLICT DO NOTHING
            """)
        // As autovacuum leaves them: statistics, and the visibility map an index-only scan reads.
        for table in ["records", "jobs", "job_records", "spaces", "devices"] { try await pool.execute("VACUUM ANALYZE \(sql: table)") }
        let traceID = try await pool.execute("SELECT md5(\(run) || 1)").first?.decode(String.self, at: 0) ?? ""
        print(String(format: "bench: a space of %d records and %d jobs, seeded in %.0f s; %d runs of each read", records, jobs,
                     Date().timeIntervalSince(seeding), runs))

        let record = "r7"
        let reads: [(String, String, String?)] = [
            ("user", "/v1/admin/support/user?user_id=\(user)", nil),
            ("device (50 jobs)", "/v1/admin/support/devices/\(device)", nil),
            ("job by trace id", "/v1/admin/support/jobs/\(traceID)", nil),
            ("space (counts up to \(SupportStore.countCap) a collection)", "/v1/admin/support/spaces/\(space)", nil),
            ("records, first page of 25", "/v1/admin/support/spaces/\(space)/records", #"{"collection":"tasks","limit":25}"#),
            ("records, a page far in", "/v1/admin/support/spaces/\(space)/records",
             #"{"collection":"tasks","limit":25,"cursor":"\#(DataQuery.cursor(after: [.string("r900000")]))"}"#),
            ("record with history", "/v1/admin/support/spaces/\(space)/record?collection=tasks&id=\(record)", nil),
            ("why", "/v1/admin/support/why?device_id=\(device)&space_id=\(space)&collection=tasks&id=\(record)", nil),
        ]
        var slowest = 0.0
        for (name, path, body) in reads {
            var times: [Double] = []
            for _ in 0..<runs {
                let started = Date()
                let (status, answer) = try http.send(
                    method: body == nil ? "GET" : "POST", path: path, token: admin, body: body.map { Array($0.utf8) } ?? [])
                times.append(Date().timeIntervalSince(started) * 1000)
                guard status == 200 else {
                    throw ValidationError("\(name) answered \(status): \(String(decoding: answer.prefix(300), as: UTF8.self))")
                }
            }
            // The first ask reads from disk what the others find in PostgreSQL's buffers.
            let first = times.removeFirst()
            times.sort()
            let p95 = times[min(times.count - 1, times.count * 95 / 100)]
            slowest = max(slowest, p95)
            print(name.padding(toLength: 44, withPad: " ", startingAt: 0)
                + String(format: " first %6.1f ms   median %6.1f ms   p95 %6.1f ms", first, times[times.count / 2], p95))
        }
        print(String(format: "slowest read (p95 after the first): %.1f ms", slowest))
    }
}
