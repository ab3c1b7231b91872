import Hummingbird
import ServiceSupport

@main
struct WorkerApp {
    static func main() async {
        let configuration = Configuration.forService("worker", defaultPort: 8090)
        let logger = Observability.bootstrap(service: "worker", level: configuration.logLevel)
        await ServiceExit.run("worker", port: configuration.port) {
            let app = try buildWorker(configuration: configuration, logger: logger)
            try await app.runService()
        }
    }
}
