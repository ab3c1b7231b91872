import Foundation
import Testing
import TestSupport

/// The `docker compose` stack as users run it, under load: scripts/compose-test builds the
/// images, brings the stack up with three workers and passes its coordinates here (the
/// gateway's published port, the containers to kill, PostgreSQL published for the check).
/// Without them this suite does not run; scripts/test leaves it to scripts/compose-test.
@Suite("compose stack", .enabled(if: ComposeStack.gatewayURL != nil))
struct ComposeTests {
    /// A steady load of at least 30 s; one worker container and then the gateway container
    /// are killed with SIGKILL on their host pid, and their restart policy brings them
    /// back. Every acknowledged push ends `succeeded`, no op is lost, none applied twice.
    @Test(.timeLimit(.minutes(5)), .enabled(if: ComposeStack.environment["COMPOSE_TEST_WORKER_CONTAINER"] != nil))
    func aWorkerAndTheGatewayKilledUnderLoadLoseAndDoubleNothing() async throws {
        let client = APIClient(base: try #require(ComposeStack.gatewayURL))
        let worker = try #require(ComposeStack.environment["COMPOSE_TEST_WORKER_CONTAINER"])
        let gateway = try #require(ComposeStack.environment["COMPOSE_TEST_GATEWAY_CONTAINER"])
        let load = try await SteadyLoad(client: client, users: 4, devicesPerUser: 2, tag: "compose")
        let started = Date()
        load.start(client: { client })
        try await Task.sleep(for: .seconds(8))
        try await ComposeStack.killAndAwaitRestart(worker)
        try await Task.sleep(for: .seconds(5))
        try await ComposeStack.killAndAwaitRestart(gateway)
        try await Task.sleep(for: .seconds(max(5, 32 - Date().timeIntervalSince(started))))
        await load.stop()
        let seconds = Date().timeIntervalSince(started)
        #expect(seconds >= 30)
        try await load.verify(client: client, within: 120)
        print("compose load: \(load.jobs.count) pushes, \(load.opCount) ops in \(Int(seconds)) s, all succeeded, none lost or doubled")
    }
}

extension ComposeTests {
    /// With RabbitMQ as three nodes (deploy/compose.cluster.yaml): the node that leads
    /// `sync.jobs` is killed with SIGKILL under load and started again. The services move
    /// to the other nodes; no push is refused for it, and every acknowledged push ends
    /// `succeeded`, none lost, none applied twice.
    @Test(.timeLimit(.minutes(4)), .enabled(if: ComposeStack.environment["COMPOSE_TEST_RABBITMQ_NODE"] != nil))
    func aRabbitMQNodeKilledUnderLoadLosesAndDoublesNothing() async throws {
        let client = APIClient(base: try #require(ComposeStack.gatewayURL))
        let node = try #require(ComposeStack.environment["COMPOSE_TEST_RABBITMQ_NODE"])
        let name = try ComposeStack.docker("inspect", "-f", "{{.Name}}", node)
        let load = try await SteadyLoad(client: client, users: 3, devicesPerUser: 2, tag: "compose-cluster")
        let started = Date()
        load.start(client: { client })
        try await Task.sleep(for: .seconds(5))
        _ = try ComposeStack.docker("kill", node)
        try await Task.sleep(for: .seconds(5))
        _ = try ComposeStack.docker("start", node)
        let back = try await eventually(within: 90, "\(name) healthy again") { () -> Double? in
            try ComposeStack.docker("inspect", "-f", "{{.State.Health.Status}}", node) == "healthy"
                ? Date().timeIntervalSince(started) : nil
        }
        try await Task.sleep(for: .seconds(3))
        await load.stop()
        // The stack's push rate limit is on (429s are the limit at work, retried like any
        // client would); the node's death must cost no other answer.
        let refused = load.refused(since: started).answers.filter { $0.key != "429" }
        #expect(refused.isEmpty, "pushes refused: \(refused)")
        let outcome = try await load.verify(client: client, within: 120)
        print(String(format: "compose cluster: %@ killed and back after %.1f s; %d pushes, %d ops; refused %d, lost %d, doubled %d",
                     name, back - 5, outcome.jobs, load.opCount, refused.values.reduce(0, +), outcome.lost, outcome.doubled))
    }
}

enum ComposeStack {
    static let environment = ProcessInfo.processInfo.environment
    static let gatewayURL = environment["COMPOSE_TEST_GATEWAY_URL"]
    /// `docker`, or `sudo docker` when the tests do not run as root.
    static let docker = (environment["COMPOSE_TEST_DOCKER"] ?? "docker").split(separator: " ").map(String.init)

    static func docker(_ arguments: String...) throws -> String {
        let command = (docker + arguments).map { "'\($0)'" }.joined(separator: " ")
        let (status, output) = Shell.output("\(command) 2>/dev/null")
        guard status == 0 else {
            throw StackError(description: "docker \(arguments.joined(separator: " ")) exited \(status)")
        }
        return output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Kills the container's main process from the host, as a crash would end it, and
    /// waits until Docker has restarted it and its health check passes again.
    static func killAndAwaitRestart(_ container: String) async throws {
        let name = try docker("inspect", "-f", "{{.Name}}", container)
        let restarts = Int(try docker("inspect", "-f", "{{.RestartCount}}", container)) ?? -1
        let pid = try docker("inspect", "-f", "{{.State.Pid}}", container)
        let sudo = docker.first == "sudo" ? "sudo " : ""
        #expect(Shell.run("\(sudo)kill -9 \(pid)") == 0, "kill -9 \(pid) (\(name))")
        let started = Date()
        _ = try await eventually(within: 90, "\(name) restarted and healthy") { () -> Bool? in
            let state = try docker("inspect", "-f", "{{.RestartCount}} {{.State.Health.Status}}", container)
            return state == "\(restarts + 1) healthy" ? true : nil
        }
        print("\(name): killed (pid \(pid)), restarted and healthy after \(String(format: "%.1f", Date().timeIntervalSince(started))) s")
    }
}
