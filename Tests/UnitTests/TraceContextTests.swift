import Foundation
import HTTPSupport
import Logging
import PQBridge
import ServiceSupport
@testable import SynclineClient
import Telemetry
import Testing

/// The pure parts of tracing: statement names, `traceparent` values, the switch that turns
/// tracing on, and JSON log lines.
@Suite("Trace context")
struct TraceContextTests {
    @Test func statementsAreNamedByOperationAndTableNeverByValue() {
        let device = "0127e12b-3bb3-4289-b9d9-d3641c500eb6"
        let cases: [(PGQuery, String)] = [
            ("SELECT name FROM devices WHERE device_id = \(device)", "SELECT devices"),
            ("INSERT INTO jobs (job_id) VALUES (\(device)) ON CONFLICT DO NOTHING", "INSERT jobs"),
            ("UPDATE ONLY user_clocks SET hlc = \(device)", "UPDATE user_clocks"),
            ("DELETE FROM records WHERE space_id = \(device)", "DELETE records"),
            ("SELECT (SELECT count(*) FROM jobs) AS n, x FROM spaces s JOIN members m USING (space_id)", "SELECT spaces"),
            ("WITH fresh AS (SELECT * FROM jobs) INSERT INTO events SELECT * FROM fresh", "INSERT events"),
            ("WITH gone AS (DELETE FROM blobs RETURNING sha) SELECT count(*) FROM gone", "SELECT gone"),
            ("SELECT 1", "SELECT"),
            ("BEGIN", "BEGIN"),
            ("  \n", ""),
        ]
        for (query, summary) in cases {
            #expect(query.summary == summary, "\(query.sql)")
            #expect(!query.summary.contains(device))
        }
    }

    @Test func traceparentsAreCheckedAndMadeByTheW3CRules() {
        #expect(TraceParent.isValid("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"))
        for invalid in [
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331", "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", "00-0af7651916cd43dd8448eb211c80319z-b7ad6b7169203331-01", "",
        ] {
            #expect(!TraceParent.isValid(invalid), "\(invalid)")
        }
        let made = (0..<100).map { _ in TraceParent.random() }
        #expect(made.allSatisfy(TraceParent.isValid) && Set(made).count == 100)
        #expect(Traces.traceID(of: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01") == "0af7651916cd43dd8448eb211c80319c")
        #expect(Traces.traceID(of: "garbage") == nil)
    }

    /// A request's trace is sampled by the service's share, whatever the device's flag
    /// says and whatever trace id it chose: ids a trace-id ratio rule would always pick
    /// (last eight bytes near zero) are sampled at the share like any other.
    @Test func aRequestsTraceIsSampledByTheServicesShareNotTheDevicesFlag() {
        let low = "00-00000000000000000100000000000000-b7ad6b7169203331-00"   // last eight bytes: 1
        let below = "00-0000000000000000ffffffffffffff7f-b7ad6b7169203331-01" // 2^63 - 1
        let above = "00-00000000000000000000000000000080-b7ad6b7169203331-01" // 2^63
        #expect(TraceParent.sampled(above, ratio: 1) == above)
        #expect(TraceParent.sampled(low, ratio: 0) == low)
        #expect(TraceParent.sampled(above, ratio: 0.5).dropLast(2) == above.dropLast(2), "the trace and parent ids stay")
        for chosen in [low, below] {
            let picked = (0..<10_000).filter { _ in TraceParent.isSampled(TraceParent.sampled(chosen, ratio: 0.1)) }.count
            #expect((800...1_200).contains(picked), "\(picked) of 10,000 pushes with one chosen id sampled at 10 %")
        }
        let share = (0..<10_000).filter { _ in TraceParent.isSampled(TraceParent.sampled(TraceParent.random(), ratio: 0.1)) }.count
        #expect((800...1_200).contains(share), "\(share) of 10,000 sampled at 10 %")
        #expect(TraceParent.isSampled(below) && !TraceParent.isSampled(low) && TraceParent.isSampled("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0b"))
        #expect(TraceParent.normalized(below.uppercased()) == below && TraceParent.normalized("00-nonsense") == nil)
        #expect(Telemetry.requestSampleRatio(["OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"]) == 0.01)
        #expect(Telemetry.requestSampleRatio([:]) == 1)
        #expect(Telemetry.requestSampleRatio(["OTEL_TRACES_SAMPLER": "always_off"]) == 0)
    }

    /// With tracing off, a caller's valid `traceparent` is kept (upper case read as lower)
    /// and an invalid one is replaced by a new trace: log lines always have a trace id.
    @Test func withTracingOffTheCallersTraceStillTravels() {
        let given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        #expect(Traces.context(traceparent: given).traceparent == given)
        #expect(Traces.context(traceparent: given.uppercased()).traceparent == given)
        let fresh = Traces.context(traceparent: "00-nonsense").traceparent
        #expect(fresh.map(TraceParent.isValid) == true && fresh != given)
        #expect(Traces.traceparent(of: Traces.context(traceparent: given)) == given)
    }

    /// A batch hands its body one context per member, tracing on or off: what each member
    /// sends on (its job message, its events) must keep its own trace.
    @Test func aBatchGivesEveryMemberItsOwnContext() async {
        let members = (0..<3).map { _ in Traces.context(traceparent: TraceParent.random()) }
        let seen = await Traces.batch("test batch", members: members) { contexts in contexts.map(\.traceparent) }
        #expect(seen == members.map(\.traceparent))
        let alone = await Traces.batch("test batch", members: [members[0]]) { contexts in contexts.map(\.traceparent) }
        #expect(alone == [members[0].traceparent])
    }

    /// A client's push is in the trace its batch's idempotency key names, in every retry.
    @Test func aClientsPushTraceIsItsBatchsKey() {
        let key = "01a218be-944d-7df0-a736-ba5c2c66d9c0"
        let first = TraceParent(batchKey: key), retry = TraceParent(batchKey: key)
        #expect(first.traceID == "01a218be944d7df0a736ba5c2c66d9c0" && retry.traceID == first.traceID)
        #expect(first.header != retry.header, "each attempt is a span of its own")
        #expect(ServiceSupport.TraceParent.isValid(first.header))
        #expect(ServiceSupport.TraceParent.isValid(TraceParent(batchKey: "not a uuid").header))
    }

    @Test func tracingIsOnOnlyWithAnEndpoint() {
        #expect(!Telemetry.isConfigured([:]))
        #expect(!Telemetry.isConfigured(["OTEL_EXPORTER_OTLP_ENDPOINT": ""]))
        #expect(Telemetry.isConfigured(["OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"]))
        #expect(Telemetry.isConfigured(["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"]))
        #expect(!Telemetry.isConfigured(["OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"]))
        #expect(!Telemetry.isConfigured(["OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "none"]))
    }

    @Test func logFormatAndSlowThresholdAreRead() throws {
        let defaults = try Configuration.read(EnvironmentReader([:]))
        #expect(defaults.logFormat == .text && defaults.slowThreshold == .seconds(1))
        let set = try Configuration.read(EnvironmentReader(["LOG_FORMAT": "JSON", "SLOW_THRESHOLD": "250ms"]))
        #expect(set.logFormat == .json && set.slowThreshold == .milliseconds(250))
        #expect(throws: Configuration.Invalid.self) { try Configuration.read(EnvironmentReader(["LOG_FORMAT": "xml"])) }
        #expect(throws: Configuration.Invalid.self) { try Configuration.read(EnvironmentReader(["SLOW_THRESHOLD": "soon"])) }
    }

    @Test func requestLinesGiveMillisecondsToTheMicrosecond() {
        #expect(RequestTelemetry.milliseconds(.microseconds(34_850)) == 34.85)
        #expect(RequestTelemetry.milliseconds(.milliseconds(1_500)) == 1_500)
        #expect(RequestTelemetry.milliseconds(.seconds(12) + .microseconds(2)) == 12_000.002)
    }

    @Test func jsonLogValuesAreValidJSON() throws {
        let value: Logger.Metadata.Value = .dictionary([
            "text": "a \"quoted\"\\ line\nwith\ttabs and \u{1}", "list": ["1", .stringConvertible(2)],
        ])
        let parsed = try JSONSerialization.jsonObject(with: Data(JSONLogLine.json(value).utf8)) as? [String: Any]
        #expect(parsed?["text"] as? String == "a \"quoted\"\\ line\nwith\ttabs and \u{1}")
        #expect(parsed?["list"] as? [String] == ["1", "2"])
    }
}

/// What a client sends is kept in a span only so long.
struct SpanAttributeBoundTests {
    @Test func aLongPathIsCutAtACharacterWithinTheBound() {
        #expect(RequestTelemetry.bounded("/v1/sync/pull") == "/v1/sync/pull")
        let long = "/" + String(repeating: "é", count: 30_000)
        let kept = RequestTelemetry.bounded(long)
        #expect(kept.utf8.count <= RequestTelemetry.maxAttribute && kept.hasSuffix("…") && kept.hasPrefix("/éé"))
    }
}
