import Foundation
import PQBridge
import Persistence
import SyncModels
import Testing

/// Each of purge's batch deletes takes what is past its retention, and only that: rows
/// are dated back two days against a retention of one, beside rows that must stay.
@Suite("Purge's deletes", .enabled(if: TestEnvironment.hasServers), .serialized, .timeLimit(.minutes(2)))
struct PurgeStoreTests {
    let day = 86_400.0
    var retention: PurgeStore.Retention {
        PurgeStore.Retention(tombstones: day, jobs: day, deadLetters: day, devices: day, publicIDReservation: day, blobs: day)
    }

    @Test func eachDeleteTakesWhatIsPastItsRetentionAndKeepsTheRest() async throws {
        try await withPool { pool in try await takesWhatIsPastItsRetention(pool) }
    }

    func takesWhatIsPastItsRetention(_ pool: PGPool) async throws {
        _ = try await Migrations.apply(on: pool, logger: TestEnvironment.logger)
        let user = UserID.unique("purge")
        let devices = DeviceStore(pool: pool)
        let revoked = try await devices.register(user: user, name: "old", platform: "ios", pushURL: nil, pushSecret: "s")
        let unseen = try await devices.register(user: user, name: "gone", platform: "ios", pushURL: nil, pushSecret: "s")
        let active = try await devices.register(user: user, name: "mac", platform: "macos", pushURL: nil, pushSecret: "s")
        try await pool.execute("UPDATE devices SET revoked_at = now() - interval '2 days' WHERE device_id = \(DeviceID(revoked.deviceID))")
        try await pool.execute("UPDATE devices SET last_seen_at = now() - interval '2 days' WHERE device_id = \(DeviceID(unseen.deviceID))")

        // Four jobs: succeeded long ago, dead long ago with and without its dead letter, succeeded just now.
        var jobs: [String] = []
        for _ in 0..<4 {
            let intake = JobStore.Intake(
                user: user, deviceID: DeviceID(active.deviceID)!, ops: [Op(opID: UUID().uuidString.lowercased(), type: .delete, collection: "n", id: "x")],
                idempotencyKey: nil, requestHash: "h", traceID: nil, maxClockSkewMilliseconds: 300_000)
            guard case .created(let job, _) = try await JobStore(pool: pool).create(intake) else { Issue.record("no job made"); return }
            jobs.append(job.job.description)
        }
        let (oldSucceeded, deadWithLetter, deadWithout, newSucceeded) = (jobs[0], jobs[1], jobs[2], jobs[3])
        try await pool.execute("""
            UPDATE jobs SET status = CASE WHEN job_id IN (\(UUID(uuidString: deadWithLetter)), \(UUID(uuidString: deadWithout)))
                                          THEN 'dead' ELSE 'succeeded' END,
                            finished_at = CASE WHEN job_id = \(UUID(uuidString: newSucceeded)) THEN now() ELSE now() - interval '2 days' END
            WHERE job_id = ANY(\(jobs.compactMap { UUID(uuidString: $0) }))
            """)
        let oldLetter = UUID(), keptLetter = try #require(UUID(uuidString: deadWithLetter))
        try await pool.execute("""
            INSERT INTO dead_letters (dead_letter_id, reason, payload, dead_at)
            VALUES (\(oldLetter), 'test', '{}', now() - interval '2 days'), (\(keptLetter), 'test', '{}', now())
            """)
        try await pool.execute("UPDATE dead_letters SET job_id = dead_letter_id WHERE dead_letter_id = \(keptLetter)")
        // In the user's space: op ids of a space that no longer exists are purged as orphans.
        let space = try #require(try await pool.execute("SELECT space_id FROM jobs WHERE job_id = \(UUID(uuidString: newSucceeded))").first)
            .decode(UUID.self, at: 0)
        let oldOp = UUID(), newOp = UUID()
        try await pool.execute("""
            INSERT INTO op_ids (space_id, op_id, created_at) VALUES (\(space), \(oldOp), now() - interval '2 days'), (\(space), \(newOp), now())
            """)
        let oldForgotten = UUID(), newForgotten = UUID()
        try await pool.execute("""
            INSERT INTO forgotten_jobs (job_id, forgotten_at) VALUES (\(oldForgotten), now() - interval '2 days'), (\(newForgotten), now())
            """)

        let report = try #require(try await PurgeStore(pool: pool).run(retention, batch: 1))
        #expect(report.devices >= 2 && report.jobs >= 2 && report.deadLetters >= 1 && report.opIDs >= 1)

        func exists(_ table: String, _ column: String, _ id: UUID?) async throws -> Bool {
            try await pool.execute("SELECT 1 FROM \(sql: table) WHERE \(sql: column) = \(id)").first != nil
        }
        #expect(try await !exists("devices", "device_id", UUID(uuidString: revoked.deviceID)))
        #expect(try await !exists("devices", "device_id", UUID(uuidString: unseen.deviceID)))
        #expect(try await exists("devices", "device_id", UUID(uuidString: active.deviceID)))
        #expect(try await !exists("jobs", "job_id", UUID(uuidString: oldSucceeded)))
        #expect(try await exists("jobs", "job_id", UUID(uuidString: deadWithLetter)), "a dead job stays while its dead letter does")
        #expect(try await !exists("jobs", "job_id", UUID(uuidString: deadWithout)))
        #expect(try await exists("jobs", "job_id", UUID(uuidString: newSucceeded)))
        #expect(try await !exists("dead_letters", "dead_letter_id", oldLetter))
        #expect(try await exists("dead_letters", "dead_letter_id", keptLetter))
        #expect(try await !exists("op_ids", "op_id", oldOp))
        #expect(try await exists("op_ids", "op_id", newOp))
        #expect(try await !exists("forgotten_jobs", "job_id", oldForgotten))
        #expect(try await exists("forgotten_jobs", "job_id", newForgotten))

        // What stays is taken away: the suites share the database, and a dead letter listed
        // with no message in the dead-letter queue would break the end-to-end tests' count.
        try await pool.execute("DELETE FROM dead_letters WHERE dead_letter_id = \(keptLetter)")
        try await pool.execute("DELETE FROM forgotten_jobs WHERE job_id = \(newForgotten)")
        try await pool.execute("DELETE FROM op_ids WHERE space_id = \(space)")
        try await pool.execute("DELETE FROM jobs WHERE user_id = \(user)")
        try await pool.execute("DELETE FROM devices WHERE user_id = \(user)")
    }
}
