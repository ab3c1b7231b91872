import Foundation
import Logging
import OTel
import ServiceLifecycle
import ServiceSupport
import Tracing

/// Traces out over OTLP/HTTP (protobuf), configured by OpenTelemetry's standard
/// variables: `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`),
/// `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER` and
/// `OTEL_TRACES_SAMPLER_ARG`, `OTEL_BSP_*`, `OTEL_SDK_DISABLED`. Off — no tracer, no
/// exporter, nothing recorded — when no endpoint is set. Logs and metrics stay where they
/// are (standard error, `/metrics`).
public enum Telemetry {
    /// Bootstraps the tracer when an endpoint is configured and returns the service that
    /// exports its spans (run it first in the service group, so it stops last and flushes
    /// what the others recorded); returns nothing when tracing is off.
    public static func bootstrap(
        service: String, logger: Logger, environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws -> [any Service] {
        guard isConfigured(environment) else { return [] }
        var configuration = OTel.Configuration.default
        configuration.serviceName = "syncline-\(service)"
        configuration.diagnosticLogger = .custom(logger)
        configuration.logs.enabled = false
        configuration.metrics.enabled = false
        // OTLP/HTTP is the one exporter built in; a gRPC endpoint would fail every export.
        configuration.traces.otlpExporter.protocol = .httpProtobuf
        let (tracer, exporting) = try OTel.makeTracingBackend(configuration: configuration)
        InstrumentationSystem.bootstrap(tracer)
        Traces.started(tracer, requestSampleRatio: requestSampleRatio(environment))
        logger.info("tracing on", metadata: [
            "otel.endpoint": "\(environment["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] ?? environment["OTEL_EXPORTER_OTLP_ENDPOINT"] ?? "")",
            "otel.sampler": "\(environment["OTEL_TRACES_SAMPLER"] ?? "parentbased_always_on")",
        ])
        return [exporting]
    }

    /// The share of requests whose traces are sampled, from `OTEL_TRACES_SAMPLER` (and its
    /// `_ARG`): a device's `traceparent` names the trace but does not decide this.
    public static func requestSampleRatio(_ environment: [String: String]) -> Double {
        switch environment["OTEL_TRACES_SAMPLER"]?.lowercased() ?? "parentbased_always_on" {
        case "always_off", "parentbased_always_off": 0
        case "traceidratio", "parentbased_traceidratio": environment["OTEL_TRACES_SAMPLER_ARG"].flatMap(Double.init) ?? 1
        default: 1
        }
    }

    /// Whether the environment asks for traces: an OTLP endpoint is set, and neither the
    /// SDK nor the traces exporter is switched off.
    public static func isConfigured(_ environment: [String: String]) -> Bool {
        let endpoint = environment["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] ?? environment["OTEL_EXPORTER_OTLP_ENDPOINT"]
        guard let endpoint, !endpoint.isEmpty else { return false }
        if environment["OTEL_SDK_DISABLED"]?.lowercased() == "true" { return false }
        if environment["OTEL_TRACES_EXPORTER"]?.lowercased() == "none" { return false }
        return true
    }
}
