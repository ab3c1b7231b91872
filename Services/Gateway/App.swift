import Hummingbird
import ServiceSupport
import Telemetry

#if canImport(Glibc)
import Glibc
#endif

/// The `gateway` command (its own executable, or `syncline gateway` in the container image).
public enum GatewayMain {
    public static func run(arguments: [String]) async {
        let (configuration, settings) = Configuration.forService(
            "gateway", defaultPort: 8080, checksTokens: true, settings: GatewaySettings.init)
        let logger = Observability.bootstrap(service: "gateway", level: configuration.logLevel, format: configuration.logFormat)
        // One descriptor per connection and stream.
        logger.info("open files allowed", metadata: [
            "limit": "\(DescriptorLimit.raiseToHardLimit())",
            "connections.max": "\(settings.http.connectionLimits.total)",
            "connections.max_per_address": "\(settings.http.connectionLimits.perAddress)",
        ])
        await ServiceExit.run("gateway", port: configuration.port) {
            let app = try await buildApplication(
                configuration: configuration, settings: settings,
                observability: try Telemetry.bootstrap(service: "gateway", logger: logger), logger: logger)
            try await app.runService()
        }
    }
}
