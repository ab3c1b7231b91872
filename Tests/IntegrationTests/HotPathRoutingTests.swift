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
/// records every statement. Each is then planned again (`EXPLAIN`, sequential scans
/// disabled, so that the plan uses an index whenever one serves), and every scan of a
/// table holding space data must go through an index that starts with `space_id`, with
/// `space_id` in its condition. What does not yet is listed, as in `SpaceKeyCatalogTests`.
@Suite("Hot path routing", .enabled(if: TestEnvironment.hasServers), .serialized)
struct HotPathRoutingTests {
    /// Scans of the hot path that reach space data otherwise: "table via index".
    static let crossSpaceScans: Set<String> = [
        "jobs via jobs_pkey", "jobs via jobs_by_user", "jobs via jobs_unpublished", "jobs via jobs_by_idempotency_key",
        "spaces via spaces_personal_of_key",
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
        let alice = "route-\(UUID().uuidString.prefix(8))", bob = "route-\(UUID().uuidString.prefix(8))"
        let devices = DeviceStore(pool: pool), spaces = SpaceStore(pool: pool)
        let device = try await devices.register(user: alice, name: "mac", platform: "macos", pushURL: nil, pushSecret: "s")
        let space = try await spaces.create(user: alice, name: "trip")
        let code = "route-\(UUID().uuidString)"
        _ = try await spaces.invite(user: alice, space: space.spaceID, role: .editor, seconds: 60, code: code, maxOpen: 10)
        #expect(try await spaces.accept(user: bob, code: code)?.role == .editor)
        let jobs = JobStore(pool: pool), apply = ApplyStore(pool: pool), pulls = PullStore(pool: pool)
        func op(_ type: OpType, _ id: String, _ data: [String: JSONValue]? = nil) -> Op {
            Op(opID: UUID().uuidString.lowercased(), type: type, collection: "notes", id: id, data: data)
        }

        recording.withLockedValue { $0 = true }
        let outcome = try await jobs.create(JobStore.Intake(
            user: alice, deviceID: device.deviceID,
            ops: [op(.upsert, "n1", ["title": "a"]), op(.patch, "n1", ["done": true]), op(.delete, "n2")],
            idempotencyKey: "route-key", requestHash: "h", traceID: nil, maxClockSkewMilliseconds: 300_000,
            spaceID: space.spaceID))
        guard case .created(let jobID, _) = outcome else { Issue.record("intake: \(outcome)"); return }
        try await jobs.markPublished([jobID])
        _ = try await apply.apply(jobIDs: [jobID], attempt: .countedInCommit)
        let view = try await jobs.view(user: alice, jobID: jobID)
        #expect(view?.status == .succeeded)
        #expect(try await spaces.role(user: bob, space: space.spaceID) == .editor)
        guard case .page(let page) = try await pulls.pull(user: bob, space: space.spaceID, since: 0, limit: 10, collections: nil) else {
            Issue.record("no page"); return
        }
        #expect(page.changes.map(\.id) == ["n1", "n2"])
        _ = try await pulls.pull(user: bob, space: space.spaceID, since: 1, limit: 10, collections: ["notes"])
        recording.withLockedValue { $0 = false }

        let statements = seen.withLockedValue { queries in
            var unique: [String: PGQuery] = [:]
            for query in queries where Self.explainable(query.sql) { unique[query.sql] = query }
            return unique.values.sorted { $0.sql < $1.sql }
        }
        #expect(statements.count >= 6, "the pool recorded \(statements.count) statements")
        let indexes = try await SpaceKeyCatalogTests.spaceTableIndexes(pool)
        let spaceTables = Set(indexes.map(\.table))
        let spaceFirst = Set(indexes.filter { $0.firstColumn == "space_id" }.map(\.name))

        var crossSpace: [String: String] = [:]  // "table via index" → the statement
        for statement in statements {
            let plan = try await pool.transaction { connection -> String in
                try connection.execute("SET LOCAL enable_seqscan = off")
                return try connection.execute(PGQuery(unsafeSQL: "EXPLAIN (FORMAT JSON) " + statement.sql, binds: statement.binds))
                    .first?.decode(String.self) ?? "[]"
            }
            let root = try #require(try JSONSerialization.jsonObject(with: Data(plan.utf8)) as? [[String: Any]]).first?["Plan"]
            for scan in Self.scans(root) where spaceTables.contains(scan.table) {
                let routed = scan.index.map { spaceFirst.contains($0) } == true && scan.condition.contains("space_id")
                if !routed { crossSpace["\(scan.table) via \(scan.index ?? "a sequential scan")"] = statement.sql }
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
        let index: String?
        let condition: String
    }

    /// The scans of a plan: each node that reads a table (sequentially, or through an
    /// index with its condition); a bitmap heap scan's index is that of its bitmap index
    /// scans below it.
    static func scans(_ node: Any?) -> [Scan] {
        guard let node = node as? [String: Any] else { return [] }
        let children = (node["Plans"] as? [Any] ?? []).flatMap { scans($0) }
        guard let table = node["Relation Name"] as? String else { return children }
        switch node["Node Type"] as? String {
        case "Seq Scan":
            return [Scan(table: table, index: nil, condition: "")] + children
        case "Index Scan", "Index Only Scan":
            return [Scan(table: table, index: node["Index Name"] as? String, condition: node["Index Cond"] as? String ?? "")] + children
        case "Bitmap Heap Scan":
            let bitmaps = bitmapIndexes(node)
            return bitmaps.map { Scan(table: table, index: $0.index, condition: $0.condition) }
                + children.filter { $0.table != "" }
        default:
            return children
        }
    }

    /// The bitmap index scans under a bitmap heap scan.
    static func bitmapIndexes(_ node: Any?) -> [(index: String, condition: String)] {
        guard let node = node as? [String: Any] else { return [] }
        let own: [(index: String, condition: String)] = (node["Node Type"] as? String) == "Bitmap Index Scan"
            ? [(node["Index Name"] as? String ?? "", node["Index Cond"] as? String ?? "")] : []
        return own + (node["Plans"] as? [Any] ?? []).flatMap { bitmapIndexes($0) }
    }
}
