import Foundation
import PQBridge
import Testing
import TestSupport

/// Retention (honest retention) with the real `purge` executable and retention set to a second.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct PurgeTests {
    static let shortRetention = "TOMBSTONE_RETENTION=1s JOB_RETENTION=1s DEAD_LETTER_RETENTION=1h DEVICE_RETENTION=365d"

    /// Runs `purge --once`; returns its exit status and what it logged.
    func purgeOnce(_ env: String = shortRetention) -> (Int32, String) {
        Shell.output("\(env) \(E2E.binaries)/purge --once 2>&1")
    }

    @Test func tombstonesArePurgedStaleCursorsGet410AndNothingResurrects() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let user = "purge-\(UUID().uuidString.prefix(6))"
            let token = await E2E.token(user)
            let device = try await api.registerDevice(token)
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            func hlc(_ offset: Int64) -> String { "\(now + offset)-00000-\(device)" }
            let oldWrite: [String: Any] = [
                "op_id": newOpID(), "type": "upsert", "collection": "recipes", "id": "b", "data": ["t": "soup"], "hlc": hlc(1),
            ]
            let first = try await api.push(token, device: device, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "recipes", "id": "a", "data": ["t": "bread"], "hlc": hlc(0)],
                oldWrite,
                ["op_id": newOpID(), "type": "upsert", "collection": "recipes", "id": "c", "data": ["t": "salad"], "hlc": hlc(2)],
            ])
            let firstJob = try #require(first.json["job_id"] as? String)
            #expect(try await api.awaitJob(token, firstJob)["status"] as? String == "succeeded")
            let (_, before) = try await api.pullAll(token)
            let delete = try await api.push(token, device: device, ops: [
                ["op_id": newOpID(), "type": "delete", "collection": "recipes", "id": "b", "hlc": hlc(3)],
            ])
            _ = try await api.awaitJob(token, try #require(delete.json["job_id"] as? String))
            let (withTombstone, tombstoneCursor) = try await api.pullAll(token)
            #expect(withTombstone.contains { $0["id"] as? String == "b" && $0["deleted"] as? Bool == true })

            try await Task.sleep(for: .milliseconds(1500))
            let (status, log) = purgeOnce()
            #expect(status == 0, "\(log)")
            #expect(log.contains("purge completed"), "\(log)")

            // The tombstone is gone; a cursor from before it must resync, not miss it.
            let stale = try await api.request("GET", "/v1/sync/pull?since=\(before)", token: token)
            #expect(stale.status == 410)
            #expect(stale.json["code"] as? String == "resync_required")
            // A cursor at or past the horizon still works, and a pull from scratch is complete.
            #expect(try await api.request("GET", "/v1/sync/pull?since=\(tombstoneCursor)", token: token).status == 200)
            let (fresh, _) = try await api.pullAll(token)
            #expect(Set(fresh.compactMap { $0["id"] as? String }) == ["a", "c"])
            #expect(fresh.allSatisfy { $0["deleted"] as? Bool == false })
            #expect((fresh.first { $0["id"] as? String == "a" }?["data"] as? [String: Any])?["t"] as? String == "bread")
            // The finished jobs (with their op_ids) are gone too.
            #expect(try await api.request("GET", "/v1/sync/jobs/\(firstJob)", token: token).status == 404)

            // The old write re-pushed after its op_id was purged cannot resurrect b.
            let again = try await api.push(token, device: device, ops: [oldWrite])
            let job = try await api.awaitJob(token, try #require(again.json["job_id"] as? String))
            let result = (job["results"] as? [[String: Any]])?.first
            #expect(result?["status"] as? String == "rejected")
            #expect(result?["reason"] as? String == "stale")
            #expect(try await api.pullAll(token).changes.contains { $0["id"] as? String == "b" } == false)
            // A new record with a current clock is fine.
            let fresher = try await api.push(token, device: device, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "recipes", "id": "d", "data": ["t": "pie"]],
            ])
            #expect((try await api.awaitJob(token, try #require(fresher.json["job_id"] as? String))["results"] as? [[String: Any]])?
                .first?["status"] as? String == "applied")
        }
    }

    /// Past the jobs' retention, purge settles a counter's and a set's ops into their fields:
    /// the stored merge state goes, readers see the same values, the version stays, and an
    /// increment re-pushed with its old clock after its op id was forgotten is superseded
    /// instead of counting twice; a new one still counts.
    @Test func purgeSettlesCountersAndSetsWithoutChangingWhatReadersSee() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let user = "settle-\(UUID().uuidString.prefix(6))"
            let token = await E2E.token(user)
            let device = try await api.registerDevice(token)
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            func op(_ type: String, _ offset: Int64, _ extra: [String: Any]) -> [String: Any] {
                ["op_id": newOpID(), "type": type, "collection": "stock", "id": "s1", "hlc": "\(now + offset)-00000-\(device)"]
                    .merging(extra) { $1 }
            }
            let oldIncrement = op("increment", 2, ["field": "n", "by": 5])
            let pushed = try await api.push(token, device: device, ops: [
                op("upsert", 0, ["data": ["n": 10, "tags": ["a"]]]), op("increment", 1, ["field": "n", "by": 1]), oldIncrement,
                op("add", 3, ["field": "tags", "values": ["b", "c"]]), op("remove", 4, ["field": "tags", "values": ["a"]]),
            ])
            _ = try await api.awaitJob(token, try #require(pushed.json["job_id"] as? String))
            func shown() async throws -> (data: [String: Any], version: Int) {
                let record = try #require(try await api.pullAll(token).changes.first { $0["id"] as? String == "s1" })
                return (try #require(record["data"] as? [String: Any]), try #require(record["version"] as? Int))
            }
            let before = try await shown()
            #expect(before.data["n"] as? Int == 16)
            #expect(before.data["tags"] as? [String] == ["b", "c"])
            let pool = PGPool(url: E2E.databaseURL!, size: 1, logger: E2E.logger)
            func mergeState() async throws -> String? {
                try await pool.execute(
                    "SELECT merge_state::text FROM records WHERE collection = 'stock' AND record_id = 's1' AND changed_by = \(user)"
                ).first?.decode(String?.self, at: 0)
            }
            #expect(try await mergeState() != nil)

            try await Task.sleep(for: .milliseconds(1500))
            let (status, log) = purgeOnce()
            #expect(status == 0, "\(log)")
            #expect(log.contains("settled_records="), "\(log)")
            #expect(try await mergeState() == nil, "settled into the fields")
            let after = try await shown()
            #expect(after.data["n"] as? Int == 16 && after.data["tags"] as? [String] == ["b", "c"])
            #expect(after.version == before.version)

            let replayed = try await api.push(token, device: device, ops: [oldIncrement, op("increment", 5_000, ["field": "n", "by": 1])])
            let job = try await api.awaitJob(token, try #require(replayed.json["job_id"] as? String))
            #expect((job["results"] as? [[String: Any]])?.map { $0["status"] as? String } == ["superseded", "applied"])
            #expect(try await shown().data["n"] as? Int == 17)
            await pool.shutdown()
        }
    }

    /// The newest change is a purged tombstone: a pull from scratch must still end at a
    /// cursor the next pull accepts, with and without a collections filter.
    @Test func aPullFromScratchAfterPurgeEndsAtACursorThatWorks() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let token = await E2E.token("resync-\(UUID().uuidString.prefix(6))")
            let device = try await api.registerDevice(token)
            for ops: [[String: Any]] in [
                [["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": "a", "data": ["t": 1]],
                 ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": "b", "data": ["t": 2]]],
                [["op_id": newOpID(), "type": "delete", "collection": "notes", "id": "a"]],
            ] {
                let push = try await api.push(token, device: device, ops: ops)
                _ = try await api.awaitJob(token, try #require(push.json["job_id"] as? String))
            }
            try await Task.sleep(for: .milliseconds(1500))
            let (status, log) = purgeOnce()
            #expect(status == 0, "\(log)")
            for filter in ["", "&collections=notes", "&collections=other"] {
                var cursor: String?
                for round in 0..<3 {
                    let path = "/v1/sync/pull?limit=1" + filter + (cursor.map { "&since=\($0)" } ?? "")
                    let page = try await api.request("GET", path, token: token)
                    #expect(page.status == 200, "round \(round) \(filter): \(page.text)")
                    if page.json["has_more"] as? Bool == false {
                        #expect(page.json["cursor"] as? String == "3", "\(filter): \(page.text)")
                    }
                    cursor = page.json["cursor"] as? String
                }
            }
        }
    }

    @Test func onlyOnePurgeRunsAtATime() async throws {
        let pool = PGPool(url: E2E.databaseURL!, size: 1, logger: E2E.logger)
        // Another purge holds the lock (its session) while this one starts.
        let (status, log) = try await pool.withConnection { connection in
            try connection.execute("SELECT pg_advisory_lock(\(Int64(0x5359_4E43_5055)))")
            defer { _ = try? connection.execute("SELECT pg_advisory_unlock(\(Int64(0x5359_4E43_5055)))") }
            return purgeOnce()
        }
        await pool.shutdown()
        #expect(status == 0)
        #expect(log.contains("another purge is running; skipped"), "\(log)")
        #expect(!log.contains("purge completed"))
        // Once it is free, a purge runs.
        let (after, afterLog) = purgeOnce("TOMBSTONE_RETENTION=30d")
        #expect(after == 0 && afterLog.contains("purge completed"), "\(afterLog)")
    }
}
