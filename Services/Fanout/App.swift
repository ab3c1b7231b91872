import Hummingbird
import ServiceSupport
import Telemetry

/// The `fanout` command (its own executable, or `syncline fanout` in the container image).
public enum FanoutMain {
    public static func run(arguments: [String]) async {
        let (configuration, settings) = Configuration.forService(
            "fanout", defaultPort: 8081, checksTokens: true, settings: FanoutSettings.init)
        let logger = Observability.bootstrap(service: "fanout", level: configuration.logLevel, format: configuration.logFormat)
        // One descriptor per connection and stream.
        logger.info("open files allowed", metadata: [
            "limit": "\(DescriptorLimit.raiseToHardLimit())",
            "connections.max": "\(settings.http.connectionLimits.total)",
            "connections.max_per_address": "\(settings.http.connectionLimits.perAddress)",
        ])
        await ServiceExit.run("fanout", port: configuration.port) {
            try await buildFanout(
                configuration: configuration, settings: settings,
                observability: try Telemetry.bootstrap(service: "fanout", logger: logger), handlingSignals: true,
                logger: logger).run()
        }
    }
}
