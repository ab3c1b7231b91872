import Hummingbird
import ServiceSupport

/// The `fanout` command (its own executable, or `syncline fanout` in the container image).
public enum FanoutMain {
    public static func run(arguments: [String]) async {
        let (configuration, settings) = Configuration.forService(
            "fanout", defaultPort: 8081, checksTokens: true, settings: FanoutSettings.init)
        let logger = Observability.bootstrap(service: "fanout", level: configuration.logLevel)
        await ServiceExit.run("fanout", port: configuration.port) {
            try await buildFanout(configuration: configuration, settings: settings, logger: logger).run()
        }
    }
}
