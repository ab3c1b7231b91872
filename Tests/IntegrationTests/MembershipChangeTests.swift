import Foundation
import PQBridge
import Persistence
import SyncModels
import TestSupport
import Testing

/// A removal or demotion and the jobs being applied in the space at that moment: each batch
/// is ordered before the change or judged by it, never both.
@Suite("Membership changes against the apply", .enabled(if: TestEnvironment.hasServers), .serialized, .timeLimit(.minutes(3)))
struct MembershipChangeTests {
    struct Stores {
        let pool: PGPool
        let devices: DeviceStore
        let jobs: JobStore
        let apply: ApplyStore
        let spaces: SpaceStore
    }

    func withStores(_ body: (Stores) async throws -> Void) async throws {
        let pool = PGPool(url: TestEnvironment.databaseURL!, size: 6, logger: TestEnvironment.logger)
        do {
            _ = try await Migrations.apply(on: pool, logger: TestEnvironment.logger)
            try await body(Stores(
                pool: pool, devices: DeviceStore(pool: pool), jobs: JobStore(pool: pool), apply: ApplyStore(pool: pool),
                spaces: SpaceStore(pool: pool)))
            await pool.shutdown()
        } catch {
            await pool.shutdown()
            throw error
        }
    }

    /// A shared space of a new owner, with `editors` joined as editors.
    func sharedSpace(_ stores: Stores, owner: UserID, editors: [UserID]) async throws -> SpaceID {
        let space = try #require(SpaceID(try await stores.spaces.create(user: owner, name: "crew").spaceID))
        for editor in editors {
            let code = UUID().uuidString
            _ = try await stores.spaces.invite(user: owner, space: space, role: .editor, seconds: 600, code: code, maxOpen: 100)
            #expect(try await stores.spaces.accept(user: editor, code: code)?.role == .editor)
        }
        return space
    }

    func intake(_ user: UserID, device: String, space: SpaceID, ops: Int) -> JobStore.Intake {
        JobStore.Intake(
            user: user, deviceID: DeviceID(device)!,
            ops: (0..<ops).map { _ in
                Op(opID: UUID().uuidString.lowercased(), type: .upsert, collection: "notes", id: "n\(Int.random(in: 0..<50))",
                   data: ["by": .string(user.text)])
            },
            idempotencyKey: nil, requestHash: "h", traceID: nil, maxClockSkewMilliseconds: 300_000, spaceID: space)
    }

    /// The worker's lock on the counter, held by a test's own transaction: a removal waits
    /// for it, so a batch that read the members before the removal commits before it.
    @Test func aRemovalWaitsForABatchHoldingTheSpacesCounter() async throws {
        try await withStores { stores in
            let owner = UserID.unique("member"), editor = UserID.unique("member")
            let space = try await sharedSpace(stores, owner: owner, editors: [editor])
            let holding = Flag(), release = Flag()
            let batch = Task {
                try await stores.pool.transaction { connection in
                    try connection.execute("""
                        INSERT INTO space_counters (space_id) VALUES (\(space))
                        ON CONFLICT (space_id) DO UPDATE SET space_id = EXCLUDED.space_id
                        """)
                    holding.set()
                    while !release.isSet { Thread.sleep(forTimeInterval: 0.01) }
                }
            }
            while !holding.isSet { try await Task.sleep(for: .milliseconds(10)) }
            let removal = Task { try await stores.spaces.change(user: owner, space: space, member: editor, to: nil) }
            try await Task.sleep(for: .milliseconds(400))
            #expect(try await stores.spaces.role(user: editor, space: space) == .editor, "removed while a batch held the counter")
            release.set()
            try await batch.value
            #expect(try await removal.value.change == .done)
            #expect(try await stores.spaces.role(user: editor, space: space) == nil)
        }
    }

    /// Two editors push without pause, each through two appliers; the owner removes one,
    /// then demotes the other, at random moments. No op of either is applied with a version
    /// above the change that took their write access, in every trial.
    @Test func noOpOfARemovedOrDemotedEditorLandsAfterTheChange() async throws {
        try await withStores { stores in
            var exercised = (removal: 0, demotion: 0)
            for _ in 0..<20 {
                let owner = UserID.unique("member"), removed = UserID.unique("member"), demoted = UserID.unique("member")
                let space = try await sharedSpace(stores, owner: owner, editors: [removed, demoted])
                var registered: [UserID: String] = [:]
                for user in [removed, demoted] {
                    registered[user] = try await stores.devices.register(
                        user: user, name: "d", platform: "p", pushURL: nil, pushSecret: "s").deviceID
                }
                let devices = registered
                let stop = Flag()
                let pushed = Locked<[(user: UserID, job: JobID)]>([])
                let batches = Locked<[UserID: Int]>([:])
                let pushers = Task {
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        for user in [removed, demoted] {
                            for _ in 0..<2 {
                                // Pushes a few jobs, then applies them as one batch, as a
                                // worker with a prefetch does; until the intake refuses.
                                group.addTask {
                                    var refused = false
                                    while !stop.isSet && !refused {
                                        var batch: [JobRef] = []
                                        for _ in 0..<3 {
                                            switch try await stores.jobs.create(intake(user, device: devices[user]!, space: space, ops: 20)) {
                                            case .created(let job, _):
                                                batch.append(job)
                                                pushed.withLock { $0.append((user, job.job)) }
                                            case .spaceNotFound, .spaceReadOnly:
                                                refused = true
                                            case let other:
                                                throw Unexpected(other)
                                            }
                                            if refused { break }
                                        }
                                        if !batch.isEmpty {
                                            _ = try await stores.apply.apply(jobs: batch, attempt: .countedInCommit)
                                            batches.withLock { $0[user, default: 0] += 1 }
                                        }
                                    }
                                }
                            }
                        }
                        try await group.waitForAll()
                    }
                }
                // Each change comes while its editor is pushing: after a few batches of theirs.
                func pushing(_ user: UserID, batches wanted: Int) async throws {
                    while batches.withLock({ $0[user, default: 0] }) < wanted { try await Task.sleep(for: .milliseconds(2)) }
                    try await Task.sleep(for: .milliseconds(Int.random(in: 0...10)))
                }
                try await pushing(removed, batches: 2)
                let removal = try await stores.spaces.change(user: owner, space: space, member: removed, to: nil)
                try await pushing(demoted, batches: batches.withLock { $0[demoted, default: 0] } + 2)
                let demotion = try await stores.spaces.change(user: owner, space: space, member: demoted, to: .viewer)
                try await Task.sleep(for: .milliseconds(30))
                stop.set()
                try await pushers.value
                let changes = [removed: try #require(removal.version), demoted: try #require(demotion.version)]
                #expect(removal.change == .done && demotion.change == .done)

                var sawBothSides: [UserID: (before: Bool, after: Bool)] = [:]
                var late: [Int64] = []
                for (user, job) in pushed.withLock({ $0 }) {
                    let view = try #require(try await stores.jobs.view(user: user, job: job, space: space))
                    #expect(view.status == .succeeded)
                    for result in view.results {
                        if result.status == .applied {
                            let version = try #require(result.version)
                            if version > changes[user]! { late.append(version) }
                            sawBothSides[user, default: (false, false)].before = true
                        } else if result.reason == RejectReason.forbidden {
                            sawBothSides[user, default: (false, false)].after = true
                        }
                    }
                }
                #expect(late.isEmpty, "\(late.count) ops applied after the change that took their author's write access (at \(changes))")
                if sawBothSides[removed].map({ $0.before && $0.after }) == true { exercised.removal += 1 }
                if sawBothSides[demoted].map({ $0.before && $0.after }) == true { exercised.demotion += 1 }
            }
            // Trials where a batch read the members before a change and was applied after it
            // (its ops forbidden): the race the lock orders. Most trials catch it; on a busy
            // machine fewer, so a few are asked for.
            print("membership changes: \(exercised.removal) of 20 removals and \(exercised.demotion) of 20 demotions met a batch in flight")
            #expect(exercised.removal >= 3 && exercised.demotion >= 3, "\(exercised)")
        }
    }
}

private struct Unexpected: Error, CustomStringConvertible {
    let description: String
    init(_ value: Any) { description = "unexpected: \(value)" }
}
