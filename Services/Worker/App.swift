import Foundation
import Hummingbird
import ServiceSupport

@main
struct WorkerApp {
    static func main() async throws {
        let configuration: Configuration
        do {
            configuration = try Configuration.fromEnvironment(defaultPort: 8090)
        } catch {
            print("worker: \(error)")
            exit(2)
        }
        let logger = Observability.bootstrap(service: "worker", level: configuration.logLevel)
        let app = try buildWorker(configuration: configuration, logger: logger)
        try await app.runService()
    }
}
