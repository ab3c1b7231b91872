import Foundation
import PQBridge
import Testing
import TestSupport

/// Group commit in the worker and at intake keeps every guarantee: jobs queued while no
/// worker runs are taken in batches once one starts.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct BatchingTests {
    /// The value of a metric line `name …` in a Prometheus exposition (summed over labels).
    static func metric(_ name: String, in text: String) -> Double {
        text.split(separator: "\n")
            .filter { $0.hasPrefix(name + " ") || $0.hasPrefix(name + "{") }
            .compactMap { $0.split(separator: " ").last.flatMap { Double($0) } }
            .reduce(0, +)
    }

    static func metrics(of process: ServiceProcess) async throws -> String {
        try await APIClient(base: "http://127.0.0.1:\(process.port)").request("GET", "/metrics").text
    }

    /// Pushes `count` jobs of `opsEach` ops for each of `users` new users, the users at
    /// once; returns each user's token and jobs.
    static func pushJobs(
        _ api: APIClient, users: Int, jobsEach count: Int, opsEach: Int = 1, tag: String, collection: String = "notes"
    ) async throws -> [(token: String, jobs: [String])] {
        try await withThrowingTaskGroup(of: (String, [String]).self) { group in
            for u in 0..<users {
                group.addTask {
                    let token = await E2E.token("\(tag)-\(u)-\(UUID().uuidString.prefix(6))")
                    let device = try await api.registerDevice(token)
                    var jobs: [String] = []
                    for i in 0..<count {
                        let answer = try await api.push(token, device: device, ops: (0..<opsEach).map { k in
                            ["op_id": newOpID(), "type": "upsert", "collection": collection, "id": "n\(i)-\(k)", "data": ["i": i]]
                        })
                        jobs.append(try #require(answer.json["job_id"] as? String, "\(answer.status) \(answer.text)"))
                    }
                    return (token, jobs)
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
    }

    /// Every job succeeded on its first attempt, and each op was applied once: the user's
    /// pull holds one record per op and its cursor counts one version each. Every job
    /// message was published at intake (none waited for the relay) and acknowledged by a
    /// worker: a batch settles each of its deliveries, not only its first.
    /// `extra` over a relay that waits a minute: these tests count each job's message once,
    /// and a loaded machine confirmed a publish later than the relay's 2 s (the job then
    /// delivered twice, applied once). A publish that never came still fails them: its job
    /// is not applied within their wait.
    static func settings(_ extra: [String: String]) -> [String: String] {
        extra.merging(["RELAY_AFTER": "60s"]) { current, _ in current }
    }

    static func expectEachAppliedOnce(_ stack: Stack, _ pushed: [(token: String, jobs: [String])], opsEach: Int = 1) async throws {
        let api = stack.client
        for (token, jobs) in pushed {
            for job in jobs {
                let view = try await api.awaitJob(token, job, within: 30)
                #expect(view["status"] as? String == "succeeded" && view["attempts"] as? Int == 1, "\(view)")
            }
            let (changes, cursor) = try await api.pullAll(token, limit: 1000)
            #expect(changes.count == jobs.count * opsEach && cursor == String(jobs.count * opsEach))
        }
        #expect(metric("syncline_relayed_jobs_total", in: try await metrics(of: stack.gateway)) == 0, "a job message waited for the relay")
        let vhost = E2E.amqpURL.flatMap { URL(string: $0.split(separator: ",").first.map(String.init) ?? $0)?.path.dropFirst() }.map(String.init) ?? "/"
        let unacknowledged = try await eventually(within: 5, "every job message acknowledged") { () -> Int? in
            let (status, output) = Shell.output(
                "rabbitmqctl -q list_queues -p '\(vhost.isEmpty ? "/" : vhost)' name messages_unacknowledged 2>/dev/null")
            guard status == 0 else { return nil }
            let line = output.split(separator: "\n").first { $0.split(whereSeparator: \.isWhitespace).first == "sync.jobs" }
            let count = line.flatMap { $0.split(whereSeparator: \.isWhitespace).last }.flatMap { Int($0) }
            return count == 0 ? 0 : nil
        }
        #expect(unacknowledged == 0)
    }

    @Test func aPoisonJobInABatchOfFiftyIsDeadLetteredAloneWhileTheOthersSucceed() async throws {
        let failing = try await FailureTests.FailingCollection("poisonbatch")
        defer { Task { try? await failing.remove() } }
        try await Stack.with(workers: 0, environment: Self.settings(["WORKER_CONCURRENCY": "1", "WORKER_BATCH_JOBS": "50"])) { stack in
            let api = stack.client
            let healthy = try await Self.pushJobs(api, users: 7, jobsEach: 3, tag: "batch-ok")
            let poisonToken = await E2E.token("batch-poison-\(UUID().uuidString.prefix(6))")
            let poisonDevice = try await api.registerDevice(poisonToken)
            let poison = try await api.push(poisonToken, device: poisonDevice, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "poisonbatch", "id": "p", "data": ["t": "never"]],
            ])
            let poisonJob = try #require(poison.json["job_id"] as? String, "\(poison.status) \(poison.text)")
            let more = try await Self.pushJobs(api, users: 7, jobsEach: 4, tag: "batch-ok")
            #expect((healthy + more).map(\.jobs.count).reduce(0, +) == 49)

            // One worker, one transaction at a time: the first job goes alone, the others
            // queued behind it leave together.
            try await stack.addWorker()
            try await Self.expectEachAppliedOnce(stack, healthy + more)
            let dead = try await api.awaitJob(poisonToken, poisonJob, within: 30)
            #expect(dead["status"] as? String == "dead" && dead["attempts"] as? Int == E2E.maxAttempts, "\(dead)")
            // The batch that held the poison job rolled back and was applied job by job.
            let log = (try? String(contentsOfFile: stack.workers[0].logPath, encoding: .utf8)) ?? ""
            let rolledBack = log.split(separator: "\n").filter { $0.contains("batch rolled back") }
                .compactMap { line in line.split(separator: " ").first { $0.hasPrefix("jobs.count=") }.flatMap { Int($0.dropFirst(11)) } }
            #expect(rolledBack.contains { $0 > 1 }, "no batch of several jobs rolled back: \(rolledBack)")
        }
    }

    @Test func aDeadlockSpendsNoAttempt() async throws {
        // Every other write to this collection is chosen as a deadlock's victim.
        let deadlocking = try await FailureTests.FailingCollection("deadlocky", deadlockEveryOther: true)
        defer { Task { try? await deadlocking.remove() } }
        try await Stack.with(workers: 0, environment: Self.settings(["WORKER_CONCURRENCY": "1"])) { stack in
            let api = stack.client
            let pushed = try await Self.pushJobs(api, users: 3, jobsEach: 4, tag: "deadlock", collection: "deadlocky")
            try await stack.addWorker()
            try await Self.expectEachAppliedOnce(stack, pushed)
            let metrics = try await Self.metrics(of: stack.workers[0])
            #expect(Self.metric("syncline_job_deadlock_retries_total", in: metrics) > 0, "no deadlock was met")
            #expect(Self.metric("syncline_job_retries_total", in: metrics) == 0, "a deadlock spent an attempt")
        }
    }

    @Test func batchesAreBoundedInOps() async throws {
        try await Stack.with(workers: 0, environment: Self.settings([
            "WORKER_CONCURRENCY": "1", "WORKER_BATCH_JOBS": "50", "WORKER_BATCH_OPS": "100",
        ])) { stack in
            let api = stack.client
            // 3 users × 6 jobs of 30 ops, queued before the worker runs: 540 ops, at most
            // three jobs (90 ops) per transaction.
            let pushed = try await Self.pushJobs(api, users: 3, jobsEach: 6, opsEach: 30, tag: "opbound")
            try await stack.addWorker()
            try await Self.expectEachAppliedOnce(stack, pushed, opsEach: 30)
            let metrics = try await Self.metrics(of: stack.workers[0])
            let batches = Self.metric("syncline_job_batch_ops_count", in: metrics)
            let withinBound = metrics.split(separator: "\n").first { $0.hasPrefix("syncline_job_batch_ops_bucket{le=\"100\"}") || $0.hasPrefix("syncline_job_batch_ops_bucket{le=\"100.0\"}") }
                .flatMap { $0.split(separator: " ").last }.flatMap { Double($0) }
            #expect(Self.metric("syncline_job_batch_ops_sum", in: metrics) == 540)
            #expect(withinBound == batches, "a batch held more than 100 ops:\n\(metrics)")
            #expect(Self.metric("syncline_job_batch_size_sum", in: metrics) > batches, "no batch held several jobs")
        }
    }

    @Test func twoWorkersBatchingTheSameUsersNeitherDeadlockNorApplyTwice() async throws {
        try await Stack.with(workers: 0, environment: Self.settings(["WORKER_CONCURRENCY": "2", "WORKER_BATCH_JOBS": "16"])) { stack in
            let api = stack.client
            // 4 users × 40 jobs, queued before any worker runs: both workers' batches hold
            // jobs of every user, and lock the same counters.
            let pushed = try await Self.pushJobs(api, users: 4, jobsEach: 40, tag: "overlap")
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await stack.addWorker() }
                group.addTask { try await stack.addWorker() }
                try await group.waitForAll()
            }
            try await Self.expectEachAppliedOnce(stack, pushed)
            var batched = 0.0
            for worker in stack.workers {
                let metrics = try await Self.metrics(of: worker)
                #expect(Self.metric("syncline_job_batch_fallbacks_total", in: metrics) == 0, "a batch rolled back: \(worker.logTail())")
                batched += Self.metric("syncline_job_batch_size_sum", in: metrics) - Self.metric("syncline_job_batch_size_count", in: metrics)
            }
            #expect(batched > 0, "no batch held more than one job")
        }
    }
}
