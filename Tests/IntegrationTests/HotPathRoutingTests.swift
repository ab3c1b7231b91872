import Foundation
import NIOConcurrencyHelpers
import PQBridge
import Persistence
import SyncModels
import Testing

/// Ready for a database distributed by `space_id` (Citus, docs/SCALING.md): what a push,
/// its apply, a job's status and a pull do reaches a space's data only through that space,
/// so that each statement routes to one shard and none fans out across spaces.
///
/// The statements are the real ones: the stores run the hot path against a pool that
/// records every statement. Each is then planned again (`EXPLAIN`), and every scan of a
/// table holding space data must be bounded by `space_id` — in its index condition, its
/// filter, or the join that matches its rows — which is what lets a distributed database send it to the space's shard. What
/// does not yet is listed, with the reason, as in `SpaceKeyCatalogTests`.
@Suite("Hot path routing", .enabled(if: TestEnvironment.hasServers), .serialized)
struct HotPathRoutingTests {
    /// Tables the hot path reads other than by space.
    static let crossSpaceScans: Set<String> = [
        // A push or a job's status without a space is the user's personal space, found by
        // its owner: `spaces` is small and written rarely, a reference table (a copy on
        // every node) when distributed, so this read stays on the node that asks.
        "spaces",
    ]

    @Test func theHotPathReachesSpaceDataOnlyThroughItsSpace() async throws {
        let seen = NIOLockedValueBox<[PGQuery]>([])
        let recording = NIOLockedValueBox(false)
        let pool = PGPool(url: TestEnvironment.databaseURL!, size: 2, logger: TestEnvironment.logger) { query in
            if recording.withLockedValue({ $0 }) { seen.withLockedValue { $0.append(query) } }
        }
        defer { Task { await pool.shutdown() } }
        _ = try await Migrations.apply(on: pool, logger: TestEnvironment.logger)

        // Two members of a shared space, each with a device.
        let alice = UserID.unique("route"), bob = UserID.unique("route")
        let devices = DeviceStore(pool: pool), spaces = SpaceStore(pool: pool)
        let device = try await devices.register(user: alice, name: "mac", platform: "macos", pushURL: nil, pushSecret: "s")
        let space = try await spaces.create(user: alice, name: "trip")
        let spaceID = try #require(SpaceID(space.spaceID)), deviceID = try #require(DeviceID(device.deviceID))
        let code = "route-\(UUID().uuidString)"
        _ = try await spaces.invite(user: alice, space: spaceID, role: .editor, seconds: 60, code: code, maxOpen: 10)
        #expect(try await spaces.accept(user: bob, code: code)?.role == .editor)
        let jobs = JobStore(pool: pool), apply = ApplyStore(pool: pool), pulls = PullStore(pool: pool)
        func op(_ type: OpType, _ id: String, _ data: [String: JSONValue]? = nil) -> Op {
            Op(opID: UUID().uuidString.lowercased(), type: type, collection: "notes", id: id, data: data)
        }

        recording.withLockedValue { $0 = true }
        let outcome = try await jobs.create(JobStore.Intake(
            user: alice, deviceID: deviceID,
            ops: [op(.upsert, "n1", ["title": "a"]), op(.patch, "n1", ["done": true]), op(.delete, "n2")],
            idempotencyKey: "route-key", requestHash: "h", traceID: nil, maxClockSkewMilliseconds: 300_000,
            spaceID: spaceID))
        guard case .created(let job, _) = outcome else { Issue.record("intake: \(outcome)"); return }
        try await jobs.markPublished([job])
        _ = try await apply.apply(jobs: [job], attempt: .countedInCommit)
        #expect(try await jobs.view(user: alice, job: job.job, space: spaceID)?.status == .succeeded)
        // A push to the personal space, its status asked without the space.
        let personal = try await jobs.create(JobStore.Intake(
            user: alice, deviceID: deviceID, ops: [op(.upsert, "p1", ["title": "b"])],
            idempotencyKey: nil, requestHash: "h2", traceID: nil, maxClockSkewMilliseconds: 300_000))
        guard case .created(let personalJob, _) = personal else { Issue.record("intake: \(personal)"); return }
        _ = try await apply.apply(jobs: [personalJob], attempt: .countedInCommit)
        #expect(try await jobs.view(user: alice, job: personalJob.job)?.status == .succeeded)
        #expect(try await spaces.role(user: bob, space: spaceID) == .editor)
        guard case .page(let page) = try await pulls.pull(user: bob, space: spaceID, since: 0, limit: 10, collections: nil) else {
            Issue.record("no page"); return
        }
        #expect(try page.changes().map(\.id) == ["n1", "n2"])
        _ = try await pulls.pull(user: bob, space: spaceID, since: 1, limit: 10, collections: ["notes"])
        recording.withLockedValue { $0 = false }

        let statements = seen.withLockedValue { queries in
            var unique: [String: PGQuery] = [:]
            for query in queries where Self.explainable(query.sql) { unique[query.sql] = query }
            return unique.values.sorted { $0.sql < $1.sql }
        }
        #expect(statements.count >= 6, "the pool recorded \(statements.count) statements")
        let indexes = try await SpaceKeyCatalogTests.spaceTableIndexes(pool)
        let spaceTables = Set(indexes.map(\.table))

        var crossSpace: [String: String] = [:]  // table → a statement that reads it so
        for statement in statements {
            let plan = try await pool.transaction { connection -> String in
                try connection.execute("SET LOCAL enable_seqscan = off")  // planned as over large tables
                return try connection.execute(PGQuery(unsafeSQL: "EXPLAIN (FORMAT JSON) " + statement.sql, binds: statement.binds))
                    .first?.decode(String.self) ?? "[]"
            }
            let root = try #require(try JSONSerialization.jsonObject(with: Data(plan.utf8)) as? [[String: Any]]).first?["Plan"]
            for scan in Self.scans(root) where spaceTables.contains(scan.table) && !scan.condition.contains("space_id") {
                crossSpace[scan.table] = statement.sql
            }
        }
        let unexpected = crossSpace.filter { !Self.crossSpaceScans.contains($0.key) }
        #expect(unexpected.isEmpty, """
            hot-path scans that reach space data without its space_id:
            \(unexpected.map { "\($0.key):\n\($0.value)" }.sorted().joined(separator: "\n\n"))
            """)
        let unneeded = Self.crossSpaceScans.subtracting(crossSpace.keys)
        #expect(unneeded.isEmpty, "listed as crossing spaces but routed by space now: \(unneeded.sorted())")
    }

    /// Statements `EXPLAIN` takes (not BEGIN, SET, …).
    static func explainable(_ sql: String) -> Bool {
        let first = sql.drop { $0.isWhitespace }.prefix { !$0.isWhitespace }.uppercased()
        return ["SELECT", "WITH", "INSERT", "UPDATE", "DELETE"].contains(first)
    }

    struct Scan {
        let table: String
        /// What bounds the rows the scan reads: its index condition and filter.
        let condition: String
    }

    /// The scans of a plan: each node that reads a table, with its index condition
    /// (a bitmap heap scan's is that of the bitmap index scans below it), its filter, and
    /// the conditions of the joins above it (a hash join matching its rows by space).
    static func scans(_ node: Any?, joins: [String] = []) -> [Scan] {
        guard let node = node as? [String: Any] else { return [] }
        let joins = joins + ["Hash Cond", "Merge Cond", "Join Filter"].compactMap { node[$0] as? String }
        let children = (node["Plans"] as? [Any] ?? []).flatMap { scans($0, joins: joins) }
        guard let table = node["Relation Name"] as? String,
              ["Seq Scan", "Index Scan", "Index Only Scan", "Bitmap Heap Scan"].contains(node["Node Type"] as? String ?? "")
        else { return children }
        let bounds = ["Index Cond", "Recheck Cond", "Filter"].compactMap { node[$0] as? String } + bitmapConditions(node) + joins
        return [Scan(table: table, condition: bounds.joined(separator: " AND "))] + children
    }

    /// The conditions of the bitmap index scans under a bitmap heap scan.
    static func bitmapConditions(_ node: Any?) -> [String] {
        guard let node = node as? [String: Any] else { return [] }
        let own = (node["Node Type"] as? String) == "Bitmap Index Scan" ? [node["Index Cond"] as? String ?? ""] : []
        return own + (node["Plans"] as? [Any] ?? []).flatMap { bitmapConditions($0) }
    }
}
