import AMQPBridge
import BrokerTopology
import Foundation
import PQBridge
import ServiceSupport
import SyncModels
import Testing
import TestSupport

/// A steady push load from several devices of several users, for fault tests. Every op
/// creates its own record, so after the load the expected state is exact: each user has
/// one record per acknowledged op, and — each op being applied exactly once — the user's
/// cursor equals that count (every application takes one version).
final class SteadyLoad: @unchecked Sendable {
    // @unchecked: `accepted` is guarded by `lock`; the rest is set in init.
    struct Device: Sendable {
        let user: String
        let token: String
        let id: String
    }

    let devices: [Device]
    let collection: String
    private let lock = NSLock()
    private var acceptedOps: [String: [String]] = [:]  // user → record ids
    private var acceptedJobs: [String] = []
    /// Pushes never acknowledged, with their last answer.
    private var abandoned: [String] = []
    /// When each answer other than 202 came, and what it was: an HTTP status, or
    /// "no answer" (a refused or cut connection).
    private var refusals: [(at: Date, answer: String)] = []
    private var task: Task<Void, Never>?
    private var stopping = false

    init(client: APIClient, users: Int, devicesPerUser: Int, tag: String) async throws {
        var devices: [Device] = []
        for u in 0..<users {
            let user = "\(tag)-\(u)-\(UUID().uuidString.prefix(6))"
            let token = await E2E.token(user)
            for d in 0..<devicesPerUser {
                devices.append(Device(user: user, token: token, id: try await client.registerDevice(token, name: "d\(d)")))
            }
        }
        self.devices = devices
        self.collection = "load"
    }

    var users: [String] { Array(Set(devices.map(\.user))).sorted() }

    /// Pushes from every device, one push at a time each, `opsPerPush` ops a push, until
    /// `stop()`. A push is retried with its Idempotency-Key until the gateway answers 202
    /// (503 while PostgreSQL is down, connection refused while the gateway is down): only
    /// a 202 acknowledges ops. A push already sent is seen through even after `stop()`: its
    /// first attempt may have committed with the answer lost, and giving up on it then
    /// would leave applied ops the load does not count.
    func start(client: @escaping @Sendable () -> APIClient, opsPerPush: Int = 3, pause: Double = 0.05) {
        let devices = self.devices
        task = Task {
            await withTaskGroup(of: Void.self) { group in
                for device in devices {
                    group.addTask {
                        while !self.isStopping {
                            let ids = (0..<opsPerPush).map { _ in "r-\(newOpID())" }
                            let ops: [[String: Any]] = ids.map {
                                ["op_id": newOpID(), "type": "upsert", "collection": self.collection, "id": $0, "data": ["n": 1]]
                            }
                            let key = newOpID()
                            // Serialized once: a retry must send the very bytes the key was
                            // first used with (a dictionary's order can differ between copies).
                            let body = try! JSONSerialization.data(withJSONObject: ["device_id": device.id, "ops": ops])
                            var giveUpAt = Date.distantFuture
                            var last = ""
                            while true {
                                do {
                                    let result = try await client().request(
                                        "POST", "/v1/sync/push", token: device.token, body: body, headers: ["Idempotency-Key": key])
                                    if result.status == 202, let job = result.json["job_id"] as? String {
                                        self.record(user: device.user, ids: ids, job: job)
                                        break
                                    }
                                    last = "HTTP \(result.status) \(result.text.prefix(200))"
                                    self.lock.withLock { self.refusals.append((Date(), String(result.status))) }
                                } catch {
                                    last = "\(error)"
                                    self.lock.withLock { self.refusals.append((Date(), "no answer")) }
                                }
                                if self.isStopping {
                                    if giveUpAt == .distantFuture { giveUpAt = Date().addingTimeInterval(30) }
                                    if Date() > giveUpAt {  // the stack never came back: verify reports it
                                        self.lock.withLock { self.abandoned.append("\(device.user): \(last)") }
                                        return
                                    }
                                }
                                try? await Task.sleep(for: .milliseconds(200))
                            }
                            try? await Task.sleep(for: .seconds(pause))
                        }
                    }
                }
            }
        }
    }

    private var isStopping: Bool { lock.withLock { stopping } }

    private func record(user: String, ids: [String], job: String) {
        lock.withLock {
            acceptedOps[user, default: []].append(contentsOf: ids)
            acceptedJobs.append(job)
        }
    }

    func stop() async {
        lock.withLock { stopping = true }
        await task?.value
    }

    var jobs: [String] { lock.withLock { acceptedJobs } }

    /// Answers other than 202 since `start`: how many of each, and the seconds from the
    /// first to the last.
    func refused(since start: Date) -> (answers: [String: Int], seconds: Double) {
        let refusals = lock.withLock { self.refusals }.filter { $0.at >= start }
        guard let first = refusals.first, let last = refusals.last else { return ([:], 0) }
        return (refusals.reduce(into: [:]) { $0[$1.answer, default: 0] += 1 }, last.at.timeIntervalSince(first.at))
    }

    /// Waits until every job acknowledged so far is terminal; when they are not in time,
    /// records what the unfinished ones look like.
    func drain(within seconds: Double) async throws {
        let jobs = self.jobs
        let pool = PGPool(url: E2E.databaseURL!, size: 1, logger: E2E.logger)
        defer { Task { await pool.shutdown() } }
        do {
            _ = try await eventually(within: seconds, "\(jobs.count) jobs terminal") {
                try await pool.value(
                    "SELECT count(*) FROM jobs WHERE job_id = ANY(\(jobs)::uuid[]) AND status = ANY(\(JobStatus.unfinished.map(\.rawValue)))",
                    as: Int.self) == 0 ? true : nil
            }
        } catch {
            Issue.record("jobs not terminal in time: \(await Self.describeUnfinished(jobs, pool: pool))")
            throw error
        }
    }

    /// The 99th percentile, in milliseconds, of commit → applied over the load's jobs.
    func appliedP99() async throws -> Double {
        let pool = PGPool(url: E2E.databaseURL!, size: 1, logger: E2E.logger)
        defer { Task { await pool.shutdown() } }
        let jobs = self.jobs
        return try await pool.value("""
            SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - created_at) * 1000)
            FROM jobs WHERE job_id = ANY(\(jobs)::uuid[])
            """, as: Double.self) ?? -1
    }
    var opCount: Int { lock.withLock { acceptedOps.values.reduce(0) { $0 + $1.count } } }

    /// What the jobs that did not finish look like, and what the broker's queues hold: for
    /// a failure report.
    private static func describeUnfinished(_ jobs: [String], pool: PGPool) async -> String {
        var report = ""
        do {
            let rows = try await pool.execute("""
                SELECT status, attempts, published_at IS NOT NULL AS published,
                       left(coalesce(last_error, ''), 100) AS error, count(*) AS n
                FROM jobs WHERE job_id = ANY(\(jobs)::uuid[]) AND status = ANY(\(JobStatus.unfinished.map(\.rawValue)))
                GROUP BY 1, 2, 3, 4 ORDER BY n DESC LIMIT 10
                """)
            report += try rows.map { row in
                let (status, attempts, published, error, count) = try row.decode((String, Int32, Bool, String, Int).self)
                return "\(count) \(status) after \(attempts) attempts, published \(published), last error \(error)"
            }.joined(separator: "; ")
            // Their ids and trace ids: what the services' log lines (`job.id`, `trace.id`) name.
            let stuck = try await pool.execute("""
                SELECT job_id::text, coalesce(trace_id, '') FROM jobs
                WHERE job_id = ANY(\(jobs)::uuid[]) AND status = ANY(\(JobStatus.unfinished.map(\.rawValue))) LIMIT 5
                """)
            report += "; e.g. " + (try stuck.map { row in
                let (id, trace) = try row.decode((String, String).self)
                return "job \(id) trace \(Traces.traceID(of: trace) ?? "-")"
            }.joined(separator: ", "))
        } catch {
            report += "(jobs unreadable: \(error))"
        }
        if let url = E2E.amqpURL, let endpoint = AMQPEndpoint(url: url) {
            let publisher = AMQPPublisher(endpoint: endpoint, topology: E2E.topology, logger: E2E.logger)
            if let stats = try? await publisher.queueStats(SynclineTopology.queueNames(retryDelays: E2E.retryDelays)) {
                report += "; queues: " + stats.map { "\($0.name) \($0.messages) ready, \($0.consumers) consumers" }
                    .joined(separator: ", ")
            }
            await publisher.shutdown()
        }
        return report
    }

    /// What `verify` counted: acknowledged ops missing from the pulls, and versions beyond
    /// one per op (an op applied twice).
    struct Outcome {
        var jobs = 0
        var lost = 0
        var doubled = 0
    }

    /// Waits until every acknowledged job is terminal, then checks: every job succeeded,
    /// no acknowledged op is missing from a pull, and each was applied exactly once.
    @discardableResult
    func verify(client: APIClient, within seconds: Double = 60) async throws -> Outcome {
        let jobs = self.jobs
        #expect(!jobs.isEmpty, "the load pushed nothing")
        let abandoned = lock.withLock { self.abandoned }
        #expect(abandoned.isEmpty, "pushes never acknowledged: \(abandoned)")
        try await drain(within: seconds)
        let pool = PGPool(url: E2E.databaseURL!, size: 1, logger: E2E.logger)
        defer { Task { await pool.shutdown() } }
        var statuses: [String: Int] = [:]
        for row in try await pool.execute("SELECT status, count(*) FROM jobs WHERE job_id = ANY(\(jobs)::uuid[]) GROUP BY status") {
            let (status, count) = try row.decode((String, Int).self)
            statuses[status] = count
        }
        #expect(statuses == ["succeeded": jobs.count], "job outcomes: \(statuses)")

        var outcome = Outcome(jobs: jobs.count)
        let expected = lock.withLock { acceptedOps }
        for (user, ids) in expected {
            let token = await E2E.token(user)
            let (changes, cursor) = try await client.pullAll(token, limit: 1000)
            let pulled = Set(changes.filter { $0["collection"] as? String == collection }.compactMap { $0["id"] as? String })
            let missing = Set(ids).subtracting(pulled)
            #expect(missing.isEmpty, "\(user): \(missing.count) acknowledged ops lost")
            #expect(pulled.count == ids.count, "\(user): pulled \(pulled.count) records for \(ids.count) ops")
            // One version per application: more would mean an op applied twice.
            #expect(Int(cursor) == ids.count, "\(user): cursor \(cursor) for \(ids.count) ops")
            outcome.lost += missing.count
            outcome.doubled += max(0, (Int(cursor) ?? 0) - pulled.count)
        }
        return outcome
    }
}
