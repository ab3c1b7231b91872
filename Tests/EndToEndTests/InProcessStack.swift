@testable import Fanout
import Foundation
@testable import Gateway
import Logging
import NIOCore
import ServiceLifecycle
import ServiceSupport
import SyncModels
import TestSupport
@testable import Worker

/// A gateway, workers and fanouts in the test's own process: each built as its executable
/// builds it, all services of one group, each on a port the kernel chose, on the database
/// and broker of the test's environment — over real HTTP, PostgreSQL and RabbitMQ, without
/// starting a process. For tests that need nothing of a process: no kill or signal, no log
/// file, no metrics scrape, and no call that blocks a thread for long — a browser's (the
/// services share the test's few cooperative threads) — those use `Stack`. Its `client`
/// answers as `Stack`'s does.
final class InProcessStack: TestStack {
    let client: APIClient
    /// The gateway's port.
    let port: Int
    /// Each fanout's port.
    let fanoutPorts: [Int]

    private init(port: Int, fanoutPorts: [Int]) {
        self.port = port
        self.fanoutPorts = fanoutPorts
        client = APIClient(base: "http://127.0.0.1:\(port)")
    }

    /// Runs `body` with a gateway, `workers` workers and `fanouts` fanouts, started with
    /// `environment` over the services' defaults, and always shuts them down gracefully after.
    static func with<T>(
        workers: Int = 1, fanouts: Int = 0, environment: [String: String] = [:], _ body: (InProcessStack) async throws -> T
    ) async throws -> T {
        let (group, running, stack) = try await start(workers: workers, fanouts: fanouts, environment: environment)
        return try await withCleanup { try await body(stack) } cleanup: {
            await group.triggerGracefulShutdown()
            _ = await running.result
        }
    }

    /// Builds and starts the services, each on port 0 — the kernel gives each a free port,
    /// read back from its listening socket, so no other process can take it first — then
    /// waits until each answers `/readyz`.
    private static func start(
        workers: Int, fanouts: Int, environment: [String: String]
    ) async throws -> (ServiceGroup, Task<Void, any Error>, InProcessStack) {
        let settings = E2E.environment.merging(E2E.serviceDefaults) { $1 }.merging(environment) { $1 }
        var configuration = try Configuration.fromEnvironment(settings)
        configuration.port = 0  // the kernel chooses (a deployment's PORT must name one)
        let bound = Locked<[Int: Int]>([:])  // service (0: the gateway, then workers, then fanouts) → its port
        func listening(_ service: Int) -> @Sendable (any Channel) async -> Void {
            { channel in bound.withLock { $0[service] = channel.localAddress?.port } }
        }
        var services: [any Service] = [try await buildApplication(
            configuration: configuration, settings: try GatewaySettings(EnvironmentReader(settings)), logger: E2E.logger,
            onServerRunning: listening(0))]
        for worker in 0..<workers {
            services.append(try buildWorker(
                configuration: configuration, settings: try WorkerSettings(EnvironmentReader(settings)), logger: E2E.logger,
                onServerRunning: listening(worker + 1)))
        }
        let firstFanout = services.count
        for fanout in 0..<fanouts {
            // A group of its own inside the stack's, which it follows: it stops its hub first.
            services.append(try await buildFanout(
                configuration: configuration, settings: try FanoutSettings(EnvironmentReader(settings)), handlingSignals: false,
                logger: E2E.logger, onServerRunning: listening(firstFanout + fanout)))
        }
        let group = ServiceGroup(configuration: .init(services: services, gracefulShutdownSignals: [], logger: E2E.logger))
        let ended = Flag()
        let running = Task {
            defer { _ = ended.set() }
            try await group.run()
        }
        do {
            let ports = try await eventually(within: 30, "every service listening") {
                let ports = bound.withLock { $0 }
                if ended.isSet { throw StackError(description: "a service ended before it listened") }
                return ports.count == services.count ? ports : nil
            }
            for port in ports.values {
                let probe = APIClient(base: "http://127.0.0.1:\(port)")
                _ = try await eventually(within: 30, "the service on port \(port) ready") {
                    if ended.isSet { throw StackError(description: "a service on port \(port) ended before it was ready") }
                    return (try? await probe.request("GET", "/readyz").status) == 200 ? true : nil
                }
            }
            let fanoutPorts = (firstFanout..<services.count).map { ports[$0]! }
            return (group, running, InProcessStack(port: ports[0]!, fanoutPorts: fanoutPorts))
        } catch {
            await group.triggerGracefulShutdown()
            if case .failure(let ended) = await running.result { throw ended }
            throw error
        }
    }
}
