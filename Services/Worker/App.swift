import Hummingbird
import ServiceSupport
import Telemetry

/// The `worker` command (its own executable, or `syncline worker` in the container image).
public enum WorkerMain {
    public static func run(arguments: [String]) async {
        let (configuration, settings) = Configuration.forService("worker", defaultPort: 8090, settings: WorkerSettings.init)
        let logger = Observability.bootstrap(service: "worker", level: configuration.logLevel, format: configuration.logFormat)
        await ServiceExit.run("worker", port: configuration.port) {
            let app = try buildWorker(
                configuration: configuration, settings: settings,
                observability: try Telemetry.bootstrap(service: "worker", logger: logger), logger: logger)
            try await app.runService()
        }
    }
}
