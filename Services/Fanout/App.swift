import Hummingbird
import ServiceSupport

@main
struct FanoutApp {
    static func main() async {
        let configuration = Configuration.forService("fanout", defaultPort: 8081, checksTokens: true)
        let logger = Observability.bootstrap(service: "fanout", level: configuration.logLevel)
        await ServiceExit.run("fanout", port: configuration.port) {
            try await buildFanout(configuration: configuration, logger: logger).run()
        }
    }
}
