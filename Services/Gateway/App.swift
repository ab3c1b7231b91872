import Foundation
import Hummingbird
import ServiceSupport

@main
struct GatewayApp {
    static func main() async throws {
        let configuration: Configuration
        do {
            configuration = try Configuration.fromEnvironment(defaultPort: 8080)
            _ = try configuration.requireJWTSecret()
        } catch {
            print("gateway: \(error)")
            exit(2)
        }
        let logger = Observability.bootstrap(service: "gateway", level: configuration.logLevel)
        let app = try await buildApplication(configuration: configuration, logger: logger)
        try await app.runService()
    }
}
