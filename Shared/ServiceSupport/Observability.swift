import Logging
import Metrics
import NIOConcurrencyHelpers
import Prometheus

/// Logging and metrics, bootstrapped once per process.
public enum Observability {
    private static let bootstrapped = NIOLockedValueBox(false)

    public static let registry = PrometheusCollectorRegistry()

    /// How log lines are written: readable text, or JSON lines (`LOG_FORMAT`).
    public enum LogFormat: String, Sendable { case text, json }

    /// Log lines written inside a trace carry its id as `trace.id`.
    public static let traceMetadata = Logger.MetadataProvider {
        guard let traceID = Traces.traceID(of: Traces.traceparent()) else { return [:] }
        return ["trace.id": .string(traceID)]
    }

    public static func bootstrap(service: String, level: Logger.Level, format: LogFormat = .text) -> Logger {
        let first = bootstrapped.withLockedValue { done in
            defer { done = true }
            return !done
        }
        if first {
            LoggingSystem.bootstrap({ label, provider in
                var handler = LineLogHandler(label: label, format: format, metadataProvider: provider)
                handler.logLevel = level
                return handler
            }, metadataProvider: traceMetadata)
            var factory = PrometheusMetricsFactory(registry: registry)
            // How many pushes or jobs shared one transaction.
            let batchBuckets: [Double] = [1, 2, 4, 8, 16, 32, 64]
            factory.valueHistogramBuckets["syncline_intake_batch_size"] = batchBuckets
            factory.valueHistogramBuckets["syncline_job_batch_size"] = batchBuckets
            // How many ops one worker transaction applied.
            factory.valueHistogramBuckets["syncline_job_batch_ops"] = [1, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000]
            MetricsSystem.bootstrap(factory)
        }
        var logger = Logger(label: "syncline.\(service)")
        logger.logLevel = level
        return logger
    }

    /// The Prometheus text exposition of every metric of this process.
    public static func exposition() -> String {
        registry.emitToString()
    }
}
