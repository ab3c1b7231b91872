import Foundation
import PQBridge
import Persistence
import SyncModels
import TestSupport
import Testing

@Suite("Persistence", .enabled(if: TestEnvironment.hasServers), .serialized, .timeLimit(.minutes(3)))
struct PersistenceTests {
    func withStores<T>(_ body: (PGPool, DeviceStore, JobStore, ApplyStore, PullStore) async throws -> T) async throws -> T {
        let pool = PGPool(url: TestEnvironment.databaseURL!, size: 4, logger: TestEnvironment.logger)
        do {
            _ = try await Migrations.apply(on: pool, logger: TestEnvironment.logger)
            let value = try await body(pool, DeviceStore(pool: pool), JobStore(pool: pool), ApplyStore(pool: pool), PullStore(pool: pool))
            await pool.shutdown()
            return value
        } catch {
            await pool.shutdown()
            throw error
        }
    }

    func user() -> UserID { .unique("persist") }

    func op(_ type: OpType, _ id: String, _ data: [String: JSONValue]? = nil, hlc: String? = nil) -> Op {
        Op(opID: UUID().uuidString.lowercased(), type: type, collection: "notes", id: id, data: data, hlc: hlc)
    }

    func intake(_ user: UserID, _ device: String, _ ops: [Op], key: String? = nil, hash: String = "h") -> JobStore.Intake {
        JobStore.Intake(user: user, deviceID: DeviceID(device)!, ops: ops, idempotencyKey: key, requestHash: hash, traceID: nil, maxClockSkewMilliseconds: 300_000)
    }

    @Test func migrationsAreIdempotentUnderConcurrency() async throws {
        try await withStores { pool, _, _, _, _ in
            let applied = try await withThrowingTaskGroup(of: [Int].self) { group in
                for _ in 0..<3 { group.addTask { try await Migrations.apply(on: pool, logger: TestEnvironment.logger) } }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            #expect(applied.isEmpty)
        }
    }

    @Test func devicesAreScopedToTheirUser() async throws {
        try await withStores { _, devices, _, _, _ in
            let alice = user(), bob = user()
            let device = try await devices.register(user: alice, name: "mac", platform: "macos", pushURL: nil, pushSecret: "s")
            let id = try #require(DeviceID(device.deviceID))
            #expect(try await devices.state(user: alice, device: id) == .active)
            #expect(try await devices.state(user: bob, device: id) == .notFound)
            #expect(try await devices.revoke(user: bob, device: id) == false)
            #expect(try await devices.revoke(user: alice, device: id))
            #expect(try await devices.revoke(user: alice, device: id))
            #expect(try await devices.state(user: alice, device: id) == .revoked)
            #expect(try await devices.list(user: alice).first?.revokedAt != nil)
            #expect(try await devices.list(user: bob).isEmpty)
        }
    }

    @Test func intakeStampsApplyAndPull() async throws {
        try await withStores { pool, devices, jobs, apply, pulls in
            let alice = user()
            let device = try await devices.register(user: alice, name: "mac", platform: "macos", pushURL: nil, pushSecret: "s")
            let future = HLC(milliseconds: Int64(Date().timeIntervalSince1970 * 1000) + 3_600_000, counter: 0, node: "x")!
            let outcome = try await jobs.create(intake(alice, device.deviceID, [
                op(.upsert, "n1", ["title": .string("a")]),
                op(.upsert, "n2", ["title": .string("b")], hlc: future.description),
                op(.delete, "n3"),
            ]))
            guard case .created(let job, 3) = outcome else { Issue.record("\(outcome)"); return }
            let jobID = job.job
            let result = try await apply.apply(jobs: [job], attempt: .countedInCommit)[jobID]
            guard case .applied(let applied)? = result, applied.checkpoint == 2, applied.hadRejectsOrConflicts,
                  applied.members == [applied.user] else { Issue.record("\(result)"); return }
            #expect(applied.user == alice)
            let typed = jobID
            let view = try #require(try await jobs.view(user: alice, job: typed))
            #expect(view.status == .succeeded)
            #expect(view.results.map(\.status) == [.applied, .rejected, .applied])
            #expect(view.results[1].reason == "clock_skew")
            #expect(view.checkpoint == "2")
            #expect(try await jobs.view(user: user(), job: typed) == nil)

            // A second delivery changes nothing.
            #expect(try await apply.apply(jobs: [job], attempt: .countedInCommit) == [jobID: .alreadyFinished(.succeeded)])
            // A message naming the job in another space finds nothing.
            let elsewhere = JobRef(space: .random(), job: jobID)
            #expect(try await apply.apply(jobs: [elsewhere], attempt: .countedInCommit) == [jobID: .unknownJob])
            #expect(try await apply.spaces(ofJobs: [jobID]) == [jobID: job.space])

            let space = try await SpaceStore(pool: pool).personalSpace(user: alice)
            guard case .page(let page) = try await pulls.pull(user: alice, space: space, since: 0, limit: 1, collections: nil) else { return }
            #expect(try page.changes().map(\.id) == ["n1"] && page.hasMore && page.cursor == "1")
            guard case .page(let rest) = try await pulls.pull(user: alice, space: space, since: 1, limit: 10, collections: nil) else { return }
            #expect(try rest.changes().map(\.id) == ["n3"] && !rest.hasMore && rest.cursor == "2")
            #expect(try rest.changes()[0].deleted && rest.changes()[0].data == nil)
            guard case .page(let none) = try await pulls.pull(user: alice, space: space, since: 2, limit: 10, collections: nil) else { return }
            #expect(try none.changes().isEmpty && none.count == 0 && none.cursor == "2" && !none.hasMore)
            guard case .page(let filtered) = try await pulls.pull(user: alice, space: space, since: 0, limit: 10, collections: ["other"]) else { return }
            #expect(try filtered.changes().isEmpty && !filtered.hasMore)
        }
    }

    /// The compact form of a page PostgreSQL gave is the full form's records less who and
    /// when wrote them last, and is what the Swift writer of the form (the fake servers',
    /// the conformance vectors') makes of those records: tombstones, publication, records
    /// of two devices, a clock of another device than the last write's, text to escape.
    @Test func bothFormsOfAPulledPageReadAsTheSameRecords() async throws {
        try await withStores { pool, devices, jobs, apply, pulls in
            let alice = user()
            let mac = try await devices.register(user: alice, name: "mac", platform: "macos", pushURL: nil, pushSecret: "s").deviceID
            let phone = try await devices.register(user: alice, name: "phone", platform: "ios", pushURL: nil, pushSecret: "s").deviceID
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            func at(_ ms: Int64, _ device: String) -> String { HLC(milliseconds: now - ms, counter: 0, node: device)!.description }
            var publish = op(.publish, "n1", hlc: at(500, phone))
            publish.publicID = "both-forms-\(UUID().uuidString.prefix(8).lowercased())"
            publish.canFork = true
            for (device, ops) in [
                (mac, [op(.upsert, "n1", ["title": "a"], hlc: at(9_000, mac)), op(.upsert, "n2", ["t": "q\"\u{1}\n\u{e9}", "deleted": true], hlc: at(8_000, mac)),
                       op(.upsert, "n3", ["x": 1], hlc: at(7_000, mac)), op(.delete, "n3", hlc: at(6_000, mac))]),
                (phone, [publish, op(.patch, "n2", ["n": 2.5], hlc: at(400, phone)), op(.upsert, "n4", ["hlc": "x"], hlc: at(300, phone))]),
            ] {
                guard case .created(let job, _) = try await jobs.create(intake(alice, device, ops)) else { Issue.record("not created"); return }
                _ = try await apply.apply(jobs: [job], attempt: .countedInCommit)
            }
            let space = try await SpaceStore(pool: pool).personalSpace(user: alice)
            func page(_ form: PullForm) async throws -> (PullPage, JSONValue) {
                guard case .page(let page) = try await pulls.pull(user: alice, space: space, since: 0, limit: 10, collections: nil, form: form),
                      let json = try? JSONParser.parse(page.json), let read = PullPage(json: json)
                else { throw UnexpectedAnswer("no \(form) page") }
                return (read, json)
            }
            let (full, _) = try await page(.full)
            let (compact, compactJSON) = try await page(.compact)
            #expect(full.changes.map(\.id) == ["n3", "n1", "n2", "n4"] && full.changes.allSatisfy { $0.updatedBy != nil && $0.updatedAt != nil })
            #expect(full.changes[1].visibility == .public && full.changes[0].deleted && full.changes[2].hlc == at(400, phone))
            var held = full
            for index in held.changes.indices { (held.changes[index].updatedAt, held.changes[index].updatedBy) = (nil, nil) }
            #expect(compact == held)
            #expect(compactJSON == full.json(.compact), "the gateway's compact page is the Swift writer's")
            #expect(compactJSON.objectValue?["devices"] == .array([.string(mac), .string(phone)]))
        }
    }

    /// A page ends at the byte budget (never before its first record) and says so with
    /// `has_more`; following the cursors yields every record once, its data as stored.
    @Test func aPageEndsAtTheByteBudgetAndPagingMissesNothing() async throws {
        try await withStores { pool, devices, jobs, apply, _ in
            let alice = user()
            let device = try await devices.register(user: alice, name: "mac", platform: "macos", pushURL: nil, pushSecret: "s")
            let text = "ünïcode \"quoted\" \\ \n" + String(repeating: "x", count: 100)
            let ops = (0..<7).map { op(.upsert, "r\($0)", ["n": .int(Int64($0)), "text": .string(text), "big": .int(Int64.max)]) }
            guard case .created(let job, _) = try await jobs.create(intake(alice, device.deviceID, ops)) else { Issue.record("no job"); return }
            _ = try await apply.apply(jobs: [job], attempt: .countedInCommit)
            let small = PullStore(pool: pool, pageBudget: 300)  // two records of about 150 stored bytes
            var since: Int64 = 0, pages: [[String]] = []
            while true {
                guard case .page(let page) = try await small.pull(user: alice, space: nil, since: since, limit: 100, collections: nil) else {
                    Issue.record("resync"); return
                }
                let changes = try page.changes()
                pages.append(changes.map(\.id))
                for change in changes {
                    #expect(change.data == ["n": .int(Int64(change.version - 1)), "text": .string(text), "big": .int(Int64.max)])
                }
                let decoded = try JSONParser.parse(page.json).objectValue
                #expect(decoded?["cursor"]?.stringValue == page.cursor && decoded?["has_more"]?.boolValue == page.hasMore)
                #expect(changes.count == page.count)
                since = Int64(page.cursor)!
                if !page.hasMore { break }
            }
            #expect(pages.flatMap { $0 } == (0..<7).map { "r\($0)" })
            #expect(pages.count >= 3 && pages.dropLast().allSatisfy { (1...3).contains($0.count) }, "\(pages)")
            let tiny = PullStore(pool: pool, pageBudget: 1)
            guard case .page(let one) = try await tiny.pull(user: alice, space: nil, since: 0, limit: 100, collections: nil) else { return }
            #expect(one.count == 1 && one.hasMore && one.cursor == "1", "a page holds at least one record")
        }
    }

    /// A replica that cannot be reached (here: nothing listens) leaves pulls to the
    /// primary, whether or not the caller asks for a checkpoint.
    @Test func anUnreachableReplicaLeavesPullsToThePrimary() async throws {
        try await withStores { pool, devices, jobs, apply, _ in
            let alice = user()
            let device = try await devices.register(user: alice, name: "mac", platform: "macos", pushURL: nil, pushSecret: "s")
            let created = try await jobs.create(intake(alice, device.deviceID, [op(.upsert, "r", ["n": 1])]))
            guard case .created(let job, _) = created else { Issue.record("no job"); return }
            _ = try await apply.apply(jobs: [job], attempt: .countedInCommit)
            let replica = PGPool(
                url: "postgresql://syncline@127.0.0.1:1/none?connect_timeout=2", size: 1, logger: TestEnvironment.logger)
            let pulls = PullStore(reads: ReadPools(primary: pool, replica: replica))
            for minCursor: Int64? in [nil, 1] {
                guard case .page(let page) = try await pulls.pull(
                    user: alice, space: nil, since: 0, limit: 100, collections: nil, minCursor: minCursor)
                else { Issue.record("resync"); return }
                #expect(try page.changes().map(\.id) == ["r"] && page.cursor == "1" && !page.hasMore)
            }
            await replica.shutdown()
        }
    }

    /// Pull formats times from epoch seconds in Swift; it must match what PostgreSQL's
    /// `syncline_rfc3339` (to_char) gives for the same instants.
    @Test func epochFormattingMatchesPostgreSQL() async throws {
        try await withStores { pool, _, _, _, _ in
            let rows = try await pool.execute("""
                SELECT syncline_rfc3339(t), extract(epoch FROM t)::text FROM unnest(ARRAY[
                  clock_timestamp(), timestamptz '2026-11-23 05:47:21.123999+00', timestamptz '1969-12-31 23:59:59.999+00',
                  timestamptz '1900-03-01 12:00:00.0005+00', timestamptz '2000-02-29 23:59:59.999999+00',
                  timestamptz '0001-01-01 00:00:00+00', timestamptz '9999-12-31 23:59:59.999999+00',
                  timestamptz '2024-06-30 10:00:00+02']) AS t
                """).map { try $0.decode((String, String).self) }
            #expect(rows.count == 8)
            for (expected, epoch) in rows {
                #expect(RFC3339.utc(epoch: epoch) == expected, "\(epoch)")
            }
        }
    }

    /// One device of a new user writing the record `notes/r`, and that record read back as
    /// stored and as a pull shows it.
    struct OneRecord {
        let pool: PGPool, jobs: JobStore, apply: ApplyStore, pulls: PullStore
        let user: UserID, device: String
        /// The push of `ops` by this device.
        let intake: ([Op]) -> JobStore.Intake
        let now = Int64(Date().timeIntervalSince1970 * 1000)

        /// A clock of this device `offset` ms from now.
        func at(_ offset: Int64, counter: Int = 0) -> String {
            HLC(milliseconds: now + offset, counter: counter, node: device)!.description
        }

        /// Pushes `ops` as one job and applies it.
        func push(_ ops: [Op]) async throws {
            guard case .created(let job, _) = try await jobs.create(intake(ops)) else { Issue.record("no job"); return }
            _ = try await apply.apply(jobs: [job], attempt: .countedInCommit)
        }

        /// The record's floor and write clock columns as stored.
        func stored() async throws -> (floor: String?, write: String?) {
            let row = try await pool.execute("""
                SELECT r.floor_clock, r.write_clock FROM records r JOIN spaces s ON s.space_id = r.space_id
                WHERE s.personal_of = \(user) AND r.record_id = 'r'
                """).first
            return (try row?.decode(String?.self, at: 0), try row?.decode(String?.self, at: 1))
        }

        /// The record as a pull from the start shows it.
        func pulled() async throws -> RecordView? {
            guard case .page(let page) = try await pulls.pull(user: user, space: nil, since: 0, limit: 10, collections: nil) else {
                return nil
            }
            return try page.changes().first
        }
    }

    func withOneRecord(_ body: (OneRecord) async throws -> Void) async throws {
        try await withStores { pool, devices, jobs, apply, pulls in
            let alice = user()
            let device = try await devices.register(user: alice, name: "mac", platform: "macos", pushURL: nil, pushSecret: "s")
            try await body(OneRecord(
                pool: pool, jobs: jobs, apply: apply, pulls: pulls, user: alice, device: device.deviceID,
                intake: { intake(alice, device.deviceID, $0) }))
        }
    }

    /// An upsert's floor is its own stamp and is stored as such in one byte; read back, it
    /// still drops a field write older than the upsert, and once a later write moves the
    /// write clock past it, the floor is stored in full and keeps doing so.
    @Test func aRecordsFloorSurvivesStorage() async throws {
        try await withOneRecord { record in
            let upsert = op(.upsert, "r", ["a": 1, "b": 2], hlc: record.at(-10_000))
            try await record.push([upsert])
            var stored = try await record.stored()
            #expect(stored.floor == "" && stored.write == StoredStamp.text(upsert.stamp))
            #expect(stored.write?.count == 56, "a stamp of UUIDs is stored short")

            try await record.push([op(.patch, "r", ["c": 3], hlc: record.at(-20_000))])
            #expect(try await record.pulled()?.data == ["a": 1, "b": 2], "a write older than the upsert's floor is dropped")

            try await record.push([op(.patch, "r", ["d": 4], hlc: record.at(-5_000))])
            stored = try await record.stored()
            let data = try await record.pulled()?.data
            #expect(stored.floor == upsert.stamp.description && data == ["a": 1, "b": 2, "d": 4])

            try await record.push([op(.patch, "r", ["c": 3], hlc: record.at(-15_000))])
            #expect(try await record.pulled()?.data == ["a": 1, "b": 2, "d": 4], "the floor stored in full still drops older writes")
        }
    }

    /// A pull shows a record's newest clock, whichever column holds it: the write clock
    /// (stored short when its node and op id are UUIDs, in either case) or a newer
    /// publication's.
    @Test func aPullShowsARecordsNewestClock() async throws {
        try await withOneRecord { record in
            try await record.push([op(.upsert, "r", ["a": 1], hlc: record.at(-10_000, counter: 7))])
            let upserted = try await record.stored().write
            #expect(try await record.pulled()?.hlc == record.at(-10_000, counter: 7) && upserted?.utf8.count == 56)

            let publish = Op(opID: UUID().uuidString.lowercased(), type: .publish, collection: "notes", id: "r",
                             hlc: record.at(-5_000, counter: 7), publicID: "newest-\(UUID().uuidString.prefix(8))", canFork: false)
            try await record.push([publish])
            #expect(try await record.pulled()?.hlc == record.at(-5_000, counter: 7), "the publication is newer than the write")

            var capitals = op(.patch, "r", ["b": 2], hlc: record.at(-1_000, counter: 7))
            capitals.opID = UUID().uuidString
            try await record.push([capitals])
            let written = try await record.stored().write
            #expect(try await record.pulled()?.hlc == record.at(-1_000, counter: 7) && written?.utf8.count == 56,
                    "a write newer than the publication, its op id in capitals")
            #expect(written.flatMap(StoredStamp.stamp) == capitals.stamp)
        }
    }

    @Test func serverStampsExceedAcceptedClientClocks() async throws {
        try await withStores { pool, devices, jobs, _, _ in
            let alice = user()
            let device = try await devices.register(user: alice, name: "m", platform: "p", pushURL: nil, pushSecret: "s")
            let ahead = HLC(milliseconds: Int64(Date().timeIntervalSince1970 * 1000) + 60_000, counter: 5, node: "zzz")!
            guard case .created(let first, _) = try await jobs.create(intake(alice, device.deviceID, [op(.upsert, "a", ["x": .int(1)], hlc: ahead.description)])),
                  case .created(let second, _) = try await jobs.create(intake(alice, device.deviceID, [op(.upsert, "b", ["x": .int(1)]), op(.upsert, "c", ["x": .int(1)])]))
            else { Issue.record("jobs not created"); return }
            let stored = try await pool.execute(
                "SELECT ops FROM jobs WHERE job_id = ANY(\([first.job, second.job])::uuid[]) ORDER BY created_at"
            ).map { try JSONCoding.decode([Op].self, from: try $0.decode(String.self, at: 0)) }
            let stamps = stored[1].compactMap(\.hlc).compactMap(HLC.init)
            #expect(stamps.count == 2)
            #expect(stamps[0] > ahead && stamps[1] > stamps[0])
        }
    }

    @Test func aRevokedOrForeignDeviceCannotCommitAJob() async throws {
        try await withStores { _, devices, jobs, _, _ in
            let alice = user()
            let device = try await devices.register(user: alice, name: "m", platform: "p", pushURL: nil, pushSecret: "s")
            let id = try #require(DeviceID(device.deviceID))
            #expect(try await jobs.create(intake(user(), device.deviceID, [op(.delete, "x")])) == .deviceNotFound)
            _ = try await devices.revoke(user: alice, device: id)
            #expect(try await jobs.create(intake(alice, device.deviceID, [op(.delete, "x")])) == .deviceRevoked)
        }
    }

    @Test func idempotencyKeyReturnsSameJobOrRefusesOtherBody() async throws {
        try await withStores { pool, devices, jobs, _, _ in
            let alice = user()
            let device = try await devices.register(user: alice, name: "m", platform: "p", pushURL: nil, pushSecret: "s")
            let ops = [op(.delete, "x")]
            let first = try await jobs.create(intake(alice, device.deviceID, ops, key: "k1", hash: "same"))
            let again = try await jobs.create(intake(alice, device.deviceID, ops, key: "k1", hash: "same"))
            guard case .created(let job, _) = first, case .existing(let sameID, .queued, 1) = again else {
                Issue.record("\(first) \(again)"); return
            }
            #expect(job.job == sameID)
            #expect(try await jobs.create(intake(alice, device.deviceID, ops, key: "k1", hash: "other")) == .keyReused)
            // Keys are per user.
            let bob = user()
            let bobsDevice = try await devices.register(user: bob, name: "m", platform: "p", pushURL: nil, pushSecret: "s")
            guard case .created = try await jobs.create(intake(bob, bobsDevice.deviceID, ops, key: "k1", hash: "same")) else {
                Issue.record("another user's key must not collide"); return
            }
            // Keys are per space: the same key in another of alice's spaces is another push.
            let shared = try await SpaceStore(pool: pool).create(user: alice, name: "shared")
            var elsewhere = intake(alice, device.deviceID, ops, key: "k1", hash: "same")
            elsewhere.spaceID = SpaceID(shared.spaceID)
            guard case .created(let other, _) = try await jobs.create(elsewhere) else {
                Issue.record("a key of one space must not collide with another's"); return
            }
            #expect(other.space.description == shared.spaceID && other.job != job.job)
            #expect(try await jobs.create(elsewhere) == .existing(jobID: other.job, status: .queued, ops: 1))
        }
    }

    /// The Discover listing's plan is read through EXPLAIN with the listing's typed
    /// parameters, and the listing itself runs with every filter.
    @Test func discoverListingsRunAndExplainWithEveryFilter() async throws {
        try await withPool(size: 1) { pool in
            let store = PublicStore(pool: pool)
            let filter = PublicStore.Filter(collection: "guides", tag: "sailing", query: "reef knot")
            let plan = try await store.plan(filter, limit: 20)
            #expect(plan.contains { $0.contains("records") }, "\(plan)")
            #expect(try await store.list(filter, limit: 20, offset: 0).isEmpty)
        }
    }

    /// A revocation waits for a push of the same user that holds the clock lock (as the
    /// intake does while it checks the device), so the two never interleave.
    @Test func aRevocationWaitsForAPushHoldingTheClockLock() async throws {
        try await withStores { pool, devices, _, _, _ in
            let alice = user()
            let device = try await devices.register(user: alice, name: "m", platform: "p", pushURL: nil, pushSecret: "s")
            let id = try #require(DeviceID(device.deviceID))
            let holding = Flag()
            let release = Flag()
            let intake = Task {
                try await pool.transaction { connection in
                    try connection.execute("""
                        INSERT INTO user_clocks (user_id, hlc_ms, hlc_counter) VALUES (\(alice), 0, 0)
                        ON CONFLICT (user_id) DO UPDATE SET user_id = EXCLUDED.user_id
                        """)
                    holding.set()
                    while !release.isSet { Thread.sleep(forTimeInterval: 0.01) }
                }
            }
            while !holding.isSet { try await Task.sleep(for: .milliseconds(10)) }
            let revoke = Task { try await devices.revoke(user: alice, device: id) }
            try await Task.sleep(for: .milliseconds(400))
            #expect(try await devices.state(user: alice, device: id) == .active, "revoked while a push held the lock")
            release.set()
            try await intake.value
            #expect(try await revoke.value)
            #expect(try await devices.state(user: alice, device: id) == .revoked)
        }
    }
}
