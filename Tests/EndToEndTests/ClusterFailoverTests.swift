import Foundation
import Testing
import TestSupport

/// Faults of a cluster made by `scripts/cluster`: three RabbitMQ nodes, and a PostgreSQL
/// primary with a synchronous standby under pg_auto_failover. The services are given every
/// node (DATABASE_URL and AMQP_URL from `scripts/cluster env`). Each test runs a steady
/// load, injects one fault under it and heals it, then checks what the fault tests on one
/// machine check: every acknowledged job succeeded, every user's pull holds exactly what
/// was acknowledged, and nothing was applied twice. Each prints one line of figures.
@Suite(.serialized, .timeLimit(.minutes(4)), .enabled(if: Cluster.enabled, "needs SYNCLINE_CLUSTER and the cluster's URLs"))
struct ClusterFailoverTests {
    /// Runs a load, the fault, then the healing, and reports. `fault` returns when the
    /// cluster is whole again; the backlog has drained when every job acknowledged until
    /// then is applied.
    func underLoad(
        _ name: String, expectRefusals: Bool, requireRefusals: Bool = false, _ fault: () async throws -> Void
    ) async throws {
        // Pulls read the primary here (the verification pulls ask for no checkpoint);
        // ReplicaReadTests read the standby.
        try await Stack.with(environment: ["DATABASE_POOL_SIZE": "4", "DATABASE_READ_URL": ""]) { stack in
            let load = try await SteadyLoad(client: stack.client, users: 3, devicesPerUser: 2, tag: "cluster")
            load.start(client: { stack.client })
            try await Task.sleep(for: .seconds(3))
            let faulted = Date()
            try await fault()
            let healed = Date().timeIntervalSince(faulted)
            try await load.drain(within: 90)
            let drained = Date().timeIntervalSince(faulted)
            try await Task.sleep(for: .seconds(1))
            await load.stop()
            let outcome = try await load.verify(client: stack.client, within: 90)
            let refused = load.refused(since: faulted)
            let answers = refused.answers.sorted { $0.key < $1.key }.map { "\($0.value) × \($0.key)" }.joined(separator: ", ")
            if expectRefusals {
                // While no server takes writes the gateway says so (503 with Retry-After);
                // it is never down itself, and a 500 is a bug.
                #expect(Set(refused.answers.keys).isSubset(of: ["503"]), "\(name): \(answers)")
                if requireRefusals { #expect(refused.answers["503"] ?? 0 > 0, "\(name): no push was refused") }
            } else {
                #expect(refused.answers.isEmpty, "\(name): pushes refused over \(refused.seconds) s: \(answers)")
            }
            let p99 = try await load.appliedP99()
            print(String(
                format: "cluster fault | %@ | healed after %.1f s | answers other than 202: %@ over %.1f s | backlog drained %.1f s after the fault | applied p99 %.0f ms | jobs %d | lost %d | doubled %d",
                name, healed, answers.isEmpty ? "none" : answers, refused.seconds, drained, p99, outcome.jobs, outcome.lost,
                outcome.doubled))
        }
    }

    /// The node that leads `sync.jobs` dies (SIGKILL) and comes back: another node takes
    /// the lead, the services move to live nodes, and the returning node rejoins.
    @Test func theJobQueueLeaderKilled() async throws {
        try await underLoad("RabbitMQ: sync.jobs leader killed, restarted", expectRefusals: false) {
            let leader = try #require(Cluster.run("leader"))
            try Cluster.must("kill \(leader)")
            try await Task.sleep(for: .seconds(5))
            try Cluster.must("start \(leader)")
        }
    }

    /// Two of three nodes down: the last one pauses (pause_minority), so no node accepts
    /// anything. Pushes are still accepted — they commit to PostgreSQL first — and their
    /// jobs are published by the relay and applied once a majority is back.
    @Test func aMajorityOfBrokerNodesLost() async throws {
        try await underLoad("RabbitMQ: two of three nodes down, then back", expectRefusals: false) {
            let leader = try #require(Cluster.run("leader"))
            let other = ["r1", "r2", "r3"].first { $0 != leader }!
            try Cluster.must("kill \(leader)")
            try await Task.sleep(for: .seconds(2))
            try Cluster.must("stop \(other)")
            try await Task.sleep(for: .seconds(6))
            try Cluster.must("start \(other)")
            try Cluster.must("start \(leader)")
        }
    }

    /// The node that leads `sync.jobs` is cut off from the other two (clients still reach
    /// it) for longer than the cluster takes to notice: the majority elects a new leader,
    /// the cut-off node pauses itself (pause_minority) and drops its clients, who move to
    /// the majority; healed, it rejoins.
    @Test func theJobQueueLeaderPartitionedAway() async throws {
        try await underLoad("RabbitMQ: sync.jobs leader partitioned away, then healed", expectRefusals: false) {
            let leader = try #require(Cluster.run("leader"))
            var healed = false
            defer { if !healed { Cluster.run("heal") } }
            try Cluster.must("partition \(leader)")
            try await Task.sleep(for: .seconds(20))
            try Cluster.must("heal")
            healed = true
            try Cluster.must("start \(leader)")  // waits until it serves again
        }
    }

    /// The failover manager's own monitor dies: the data path does not use it.
    @Test func theMonitorKilled() async throws {
        try await underLoad("pg_auto_failover monitor killed, restarted", expectRefusals: false) {
            try Cluster.must("kill monitor")
            try await Task.sleep(for: .seconds(5))
            try Cluster.must("start monitor")
        }
    }

    /// A planned switchover and a switch back, under load.
    @Test func aSwitchoverAndBack() async throws {
        try Cluster.must("wait-standby")
        try await underLoad("PostgreSQL: switchover, then back", expectRefusals: true) {
            try Cluster.must("switchover")
            try await Task.sleep(for: .seconds(2))
            try Cluster.must("switchover")
        }
    }

    /// The primary's host dies (its keeper and PostgreSQL killed together): the monitor
    /// promotes the synchronous standby, the services reconnect to it, and nothing
    /// acknowledged is lost. The promoted node is alone, so writes are refused until the
    /// old primary, started again, rejoins as its standby: the fault is over then.
    @Test func thePrimaryKilled() async throws {
        let primary = try #require(Cluster.run("primary"))
        try await underLoad("PostgreSQL: primary killed, standby promoted, old primary back", expectRefusals: true) {
            try Cluster.must("kill \(primary)")
            _ = try await eventually(within: 60, "a new primary") {
                Cluster.run("primary").flatMap { $0 != primary && !$0.isEmpty ? $0 : nil }
            }
            try Cluster.must("start \(primary)")
            try Cluster.must("wait-standby")
        }
    }

    /// The standby stops. pg_auto_failover keeps the primary writable without synchronous
    /// replication (`wait_primary`), so a commit is then on one node only; the services
    /// refuse writes (503) rather than acknowledge one, and take them again once the
    /// standby is back. Without that refusal no push would be refused here.
    @Test func theStandbyStopped() async throws {
        try Cluster.must("wait-standby")
        let standby = try #require(Cluster.run("standby"))
        try await underLoad("PostgreSQL: standby stopped, then back", expectRefusals: true, requireRefusals: true) {
            try Cluster.must("stop \(standby)")
            _ = try await eventually(within: 60, "the primary writing alone (wait_primary)") {
                Cluster.run("status").flatMap { $0.range(of: #"wait_primary \|\s+wait_primary"#, options: .regularExpression) != nil ? true : nil }
            }
            // Longer than the services wait for a standby (DATABASE_REQUIRE_STANDBY).
            try await Task.sleep(for: .seconds(8))
            try Cluster.must("start \(standby)")
            try Cluster.must("wait-standby")
        }
    }
}

/// `scripts/cluster`, as SYNCLINE_CLUSTER names it.
enum Cluster {
    static let script = E2E.environment["SYNCLINE_CLUSTER"]
    static var enabled: Bool { script != nil && E2E.enabled }
    static let log = (E2E.environment["SYNCLINE_TEST_OUTPUT"] ?? NSTemporaryDirectory()) + "/cluster.log"

    /// The command's standard output, trimmed, or nil when it failed.
    static func run(_ arguments: String) -> String? {
        let (status, output) = Shell.output("\(script!) \(arguments) 2>>\(log)")
        return status == 0 ? output.trimmingCharacters(in: .whitespacesAndNewlines) : nil
    }

    static func must(_ arguments: String) throws {
        guard run(arguments) != nil else { throw Failed(command: arguments) }
    }

    struct Failed: Error, CustomStringConvertible {
        let command: String
        var description: String { "scripts/cluster \(command) failed (see \(Cluster.log))" }
    }
}
