import Foundation
@testable import Gateway
import Logging
import ServiceLifecycle
import ServiceSupport
import TestSupport
@testable import Worker

/// A gateway and workers in the test's own process: each built as its executable builds
/// it, all services of one group, each on a port of its own and on the database and broker
/// of the test's environment — over real HTTP, PostgreSQL and RabbitMQ, without starting a
/// process. For tests that need nothing of a process: no kill or signal, no log file, no
/// metrics scrape (those use `Stack`). Its `client` answers as `Stack`'s does.
final class InProcessStack: TestStack {
    let client: APIClient
    let port: Int

    private init(port: Int) {
        self.port = port
        client = APIClient(base: "http://127.0.0.1:\(port)")
    }

    /// Runs `body` with a gateway and `workers` workers, started with `environment` over
    /// the services' defaults, and always shuts them down gracefully after.
    static func with<T>(
        workers: Int = 1, environment: [String: String] = [:], _ body: (InProcessStack) async throws -> T
    ) async throws -> T {
        let (group, running, stack) = try await start(workers: workers, environment: environment)
        return try await withCleanup { try await body(stack) } cleanup: {
            await group.triggerGracefulShutdown()
            _ = await running.result
        }
    }

    /// Builds and starts the services, then waits until each answers `/readyz`. A port
    /// another process took first makes its service fail: the whole group is then started
    /// again on other ports.
    private static func start(
        workers: Int, environment: [String: String]
    ) async throws -> (ServiceGroup, Task<Void, any Error>, InProcessStack) {
        var failure: (any Error)?
        for _ in 1...3 {
            let settings = E2E.environment.merging(E2E.serviceDefaults) { $1 }.merging(environment) { $1 }
            func withPort(_ port: Int) -> [String: String] { settings.merging(["PORT": String(port)]) { $1 } }
            let ports = (0...workers).map { _ in E2E.freePort() }
            let gatewayEnvironment = withPort(ports[0])
            var services: [any Service] = [try await buildApplication(
                configuration: try Configuration.fromEnvironment(gatewayEnvironment),
                settings: try GatewaySettings(EnvironmentReader(gatewayEnvironment)), logger: E2E.logger)]
            for port in ports.dropFirst() {
                let workerEnvironment = withPort(port)
                services.append(try buildWorker(
                    configuration: try Configuration.fromEnvironment(workerEnvironment),
                    settings: try WorkerSettings(EnvironmentReader(workerEnvironment)), logger: E2E.logger))
            }
            let group = ServiceGroup(configuration: .init(services: services, gracefulShutdownSignals: [], logger: E2E.logger))
            let ended = Flag()
            let running = Task {
                defer { _ = ended.set() }
                try await group.run()
            }
            do {
                for port in ports { try await waitUntilReady(port: port, unless: ended) }
                return (group, running, InProcessStack(port: ports[0]))
            } catch {
                failure = error
                await group.triggerGracefulShutdown()
                if case .failure(let ended) = await running.result { failure = ended }
            }
        }
        throw failure ?? StackError(description: "the in-process stack did not start")
    }

    /// Waits until `/readyz` on `port` answers 200; throws when the group ended first or
    /// after 30 s.
    private static func waitUntilReady(port: Int, unless ended: Flag) async throws {
        let probe = APIClient(base: "http://127.0.0.1:\(port)")
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            if ended.isSet { throw StackError(description: "a service on port \(port) ended before it was ready") }
            // Answered from this process's own socket, not another's that took the port.
            if (try? await probe.request("GET", "/readyz").status) == 200, Loopback.isListening(pid: getpid(), port: port) { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw StackError(description: "the service on port \(port) was not ready after 30 s")
    }
}
