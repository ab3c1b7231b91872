import Hummingbird
import ServiceSupport

@main
struct GatewayApp {
    static func main() async {
        let configuration = Configuration.forService("gateway", defaultPort: 8080, checksTokens: true)
        let logger = Observability.bootstrap(service: "gateway", level: configuration.logLevel)
        await ServiceExit.run("gateway", port: configuration.port) {
            let app = try await buildApplication(configuration: configuration, logger: logger)
            try await app.runService()
        }
    }
}
