import Foundation
import NIOConcurrencyHelpers
import ServiceSupport
import SynclineClient
import Testing
import TestSupport

/// Traces as an operator's collector receives them: the services export over OTLP/HTTP to
/// a real receiver (`scripts/otlp-receiver`, decoding with `opentelemetry-proto`).
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct TracingTests {
    /// A push from the Swift client, applied by a worker and poked by fanout to another
    /// device's stream, is one trace: the client's trace id, spans from all three services,
    /// each parented on the one before it across both broker hops; database spans name
    /// statements and never carry a value.
    @Test func aPushIsOneTraceFromTheDeviceThroughTheWorkerToTheOtherDevicesStream() async throws {
        let receiver = try await OTLPReceiver()
        defer { receiver.stop() }
        try await Stack.with(workers: 1, fanouts: 1, environment: receiver.environment) { stack in
            try await stack.replaceGateway(environment: receiver.environment.merging(["LOG_FORMAT": "json"]) { $1 })
            let user = ClientTests.user()
            let token = await E2E.token(user)
            let other = try await stack.client.registerDevice(token)
            let stream = try SSEClient(port: stack.fanouts[0].port, path: "/v1/stream?device_id=\(other)&access_token=\(token)")
            defer { stream.close() }
            _ = try await stream.inbox.next("hello")

            let secret = "secret-\(UUID().uuidString)"
            let device = try ClientTests.device(stack, user: user)
            _ = try await device.client.upsert("notes", id: "n1", data: ["title": .string(secret)])
            try await device.client.sync()
            _ = try await stream.inbox.next("poke", within: 10)
            let traceID = try #require(try await device.client.status().lastPushTraceID)
            #expect(traceID.count == 32)

            // Each process exports on its own schedule: wait for the last of them.
            let expected = [
                ("syncline-gateway", "POST /v1/sync/push"), ("syncline-gateway", "intake commit"), ("syncline-gateway", "publish sync.jobs"),
                ("syncline-gateway", "COMMIT"), ("syncline-worker", "process sync.jobs"), ("syncline-worker", "publish sync.events"),
                ("syncline-worker", "COMMIT"), ("syncline-fanout", "poke "),
            ]
            let spans = try await eventually(within: 20, "the push's spans from the gateway, the worker and fanout") {
                let spans = receiver.spans(inTrace: traceID)
                let all = expected.allSatisfy { service, name in
                    spans.contains { $0.service == service && ($0.name == name || name.hasSuffix(" ") && $0.name.hasPrefix(name)) }
                }
                return all ? spans : nil
            }
            let named = { (service: String, name: String) throws -> OTLPReceiver.Span in
                try #require(spans.first { $0.service == service && $0.name == name }, "no \(name) span from \(service)")
            }
            let server = try named("syncline-gateway", "POST /v1/sync/push")
            #expect(server.kind == "server" && server.attributes["http.route"] as? String == "/v1/sync/push")
            #expect(server.attributes["http.response.status_code"] as? Int == 202)
            // The client's attempt is the root: its span id is not among the server's spans.
            #expect(server.parent != nil && !spans.contains { $0.id == server.parent })
            let intake = try named("syncline-gateway", "intake commit")
            #expect(intake.parent == server.id)
            let publish = try named("syncline-gateway", "publish sync.jobs")
            #expect(publish.kind == "producer" && publish.parent == intake.id)
            let process = try named("syncline-worker", "process sync.jobs")
            #expect(process.kind == "consumer" && process.parent == publish.id)
            let announce = try named("syncline-worker", "publish sync.events")
            #expect(announce.kind == "producer" && announce.parent == process.id)
            let poke = try #require(spans.first { $0.service == "syncline-fanout" && $0.name.hasPrefix("poke ") })
            #expect(poke.kind == "consumer" && poke.parent == announce.id)
            #expect(poke.attributes["syncline.streams.sent"] as? Int == 1)

            // The gateway's log line of the push: JSON, with the route template and the trace id.
            let lines = try String(contentsOfFile: stack.gateway.logPath, encoding: .utf8).split(separator: "\n")
            let logged = lines.compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] }
                .filter { $0["message"] as? String == "request" && $0["trace.id"] as? String == traceID }
            #expect(logged.count == 1, "\(logged)")
            if let line = logged.first {
                #expect(line["http.route"] as? String == "/v1/sync/push" && line["http.response.status_code"] as? String == "202")
                #expect(line["http.request.method"] as? String == "POST" && Double(line["duration_ms"] as? String ?? "") != nil)
                #expect(Int(line["http.response.body.size"] as? String ?? "") ?? 0 > 0)
            }

            // The job's statements, in the gateway's and the worker's transactions.
            let statements = spans.filter { $0.attributes["db.system.name"] as? String == "postgresql" }
            #expect(statements.contains { $0.service == "syncline-gateway" && $0.parent == intake.id && $0.name == "COMMIT" })
            #expect(statements.contains { $0.service == "syncline-worker" && $0.parent == process.id && ($0.name.hasPrefix("INSERT ") || $0.name.hasPrefix("UPDATE ")) })
            for statement in statements {
                #expect(statement.kind == "client")
                let text = "\(statement.attributes)"
                #expect(!text.contains(secret) && !text.contains(user), "a value in \(statement.name)")
            }
        }
    }

    /// Pushes that share a group commit: one batch span of its own trace links to each
    /// push, and each push's trace holds a span linked back to the batch.
    @Test func pushesSharingAGroupCommitAreLinkedToIt() async throws {
        let receiver = try await OTLPReceiver()
        defer { receiver.stop() }
        // One intake slot: pushes that arrive while it commits wait, and go together.
        try await Stack.with(workers: 1, environment: receiver.environment.merging(["INTAKE_CONCURRENCY": "1"]) { $1 }) { stack in
            let token = await E2E.token(ClientTests.user())
            let device = try await stack.client.registerDevice(token)
            let traces = (0..<24).map { _ in String(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()) }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for trace in traces {
                    group.addTask {
                        let answer = try await stack.client.push(token, device: device, ops: [
                            ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": UUID().uuidString, "data": ["n": 1]],
                        ], headers: ["traceparent": "00-\(trace)-00f067aa0ba902b7-01"])
                        #expect(answer.status == 202)
                    }
                }
                try await group.waitForAll()
            }
            let batch = try await eventually(within: 20, "a group commit of several pushes") {
                receiver.all().first { $0.name == "intake commit" && $0.links.count > 1 }
            }
            #expect(!traces.contains(batch.trace), "the batch has a trace of its own")
            for link in batch.links {
                #expect(traces.contains(link.trace))
                let member = try await eventually(within: 10, "the batch's span in a push's trace") {
                    receiver.spans(inTrace: link.trace).first { $0.name == "intake commit" }
                }
                #expect(member.links.contains { $0.trace == batch.trace && $0.span == batch.id })
            }
        }
    }

    /// Devices send every push's `traceparent` flagged sampled, with trace ids a rule on the
    /// id would always pick (last eight bytes zero): the service's share decides anyway. At
    /// 50 %, some of 40 pushes have spans and the others none (the chance of all or none is
    /// 2 × 2⁻⁴⁰), and every push still has its trace id in the log line.
    @Test func aDevicesSampledFlagDoesNotOverrideTheServicesShare() async throws {
        let receiver = try await OTLPReceiver()
        defer { receiver.stop() }
        let sampling = ["OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.5"]
        try await Stack.with(workers: 1, environment: receiver.environment.merging(sampling) { $1 }) { stack in
            let token = await E2E.token(ClientTests.user())
            let device = try await stack.client.registerDevice(token)
            let traces = (0..<40).map { _ in String(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased().prefix(16)) + String(repeating: "0", count: 16) }
            for trace in traces {
                let answer = try await stack.client.push(token, device: device, ops: [
                    ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": UUID().uuidString, "data": ["n": 1]],
                ], headers: ["traceparent": "00-\(trace)-00f067aa0ba902b7-01"])
                #expect(answer.status == 202)
            }
            _ = try await eventually(within: 20, "the sampled pushes' spans") {
                receiver.all().contains { $0.name == "POST /v1/sync/push" } ? true : nil
            }
            try await Task.sleep(for: .seconds(2))  // what else was exported, past the batch delay
            let traced = Set(receiver.all().filter { $0.name == "POST /v1/sync/push" }.map(\.trace)).intersection(traces)
            #expect(!traced.isEmpty && traced.count < traces.count, "\(traced.count) of \(traces.count) pushes traced at 50 %")
            let logged = try String(contentsOfFile: stack.gateway.logPath, encoding: .utf8)
            #expect(traces.allSatisfy { logged.contains("trace.id=\($0)") }, "every push's line names its trace")
        }
    }
}

/// `scripts/otlp-receiver` on a free loopback port, writing the spans it receives to a file.
final class OTLPReceiver: Sendable {
    struct Span: @unchecked Sendable {
        // @unchecked: the attribute values are decoded JSON, never mutated.
        let service: String, trace: String, id: String, parent: String?, name: String, kind: String
        /// Unix time in nanoseconds.
        let start: UInt64, end: UInt64
        let attributes: [String: Any]
        let links: [(trace: String, span: String)]

        var seconds: Double { Double(end &- start) / 1e9 }
    }

    let port = E2E.freePort()
    let file: String
    private let process: ShellProcess

    init() async throws {
        file = (E2E.environment["SYNCLINE_TEST_OUTPUT"] ?? NSTemporaryDirectory()) + "/otlp-\(port).jsonl"
        FileManager.default.createFile(atPath: file, contents: nil)
        let script = FileManager.default.currentDirectoryPath + "/scripts/otlp-receiver"
        process = try ShellProcess("exec python3 \(script) \(port) \(file) 2>>\(file).log", what: "the OTLP receiver")
        _ = try await eventually(within: 15, "the OTLP receiver") {
            Loopback.connect(port: port).map { fd in close(fd); return true }
        }
    }

    /// What the services need to export here, quickly (a short batch delay).
    var environment: [String: String] {
        ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:\(port)", "OTEL_BSP_SCHEDULE_DELAY": "100"]
    }

    func all() -> [Span] {
        let text = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            guard let object = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any],
                  let trace = object["trace_id"] as? String, let id = object["span_id"] as? String,
                  let name = object["name"] as? String else { return nil }
            let links = (object["links"] as? [[String: String]] ?? []).compactMap { link in
                link["trace_id"].flatMap { trace in link["span_id"].map { (trace, $0) } }
            }
            return Span(
                service: object["service"] as? String ?? "", trace: trace, id: id, parent: object["parent_span_id"] as? String,
                name: name, kind: object["kind"] as? String ?? "",
                start: (object["start_ns"] as? NSNumber)?.uint64Value ?? 0, end: (object["end_ns"] as? NSNumber)?.uint64Value ?? 0,
                attributes: object["attributes"] as? [String: Any] ?? [:],
                links: links)
        }
    }

    func spans(inTrace trace: String) -> [Span] { all().filter { $0.trace == trace } }

    /// Where the time of each server span slower than `seconds` went: its trace's spans
    /// within it, longest first, and the time none of its children account for (CPU, the
    /// scheduler, waits no span names). One line per slow span, for a test's output.
    func breakdowns(slowerThan seconds: Double) -> [String] {
        let spans = all()
        let byParent = Dictionary(grouping: spans.filter { $0.parent != nil }, by: { $0.parent! })
        // A stream's request lasts as long as the stream: not a slow answer.
        return spans.filter { $0.kind == "server" && $0.seconds > seconds && !$0.name.hasSuffix(" /v1/stream") }.map { slow in
            let children = byParent[slow.id] ?? []
            let covered = children.reduce(0) { $0 + $1.seconds }
            func describe(_ span: Span, depth: Int) -> [String] {
                let own = String(format: "%@ %.3f s", span.name, span.seconds)
                guard depth < 3 else { return [own] }
                let inner = (byParent[span.id] ?? []).sorted { $0.seconds > $1.seconds }.prefix(3)
                return [own] + inner.flatMap { describe($0, depth: depth + 1).map { "  " + $0 } }
            }
            let top = children.sorted { $0.seconds > $1.seconds }.prefix(4).flatMap { describe($0, depth: 1) }
            return String(format: "%@ %@ %.3f s (trace %@): in no child span %.3f s; ", slow.service, slow.name, slow.seconds,
                          slow.trace, max(0, slow.seconds - covered)) + top.joined(separator: " | ")
        }
    }

    func stop() { process.stop() }
}
