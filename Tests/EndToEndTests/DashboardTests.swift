import Foundation
import Testing
import Yams
import TestSupport

/// The operators' view in deploy/observability: every metric the Grafana dashboard and the
/// Prometheus alert rules query is one the running services export.
@Suite(.serialized, .timeLimit(.minutes(2)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct DashboardTests {
    static let directory = URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent("deploy/observability")

    /// The PromQL expressions of the dashboard's panels and of the alert rules.
    static func expressions() throws -> [String] {
        let dashboard = try JSONSerialization.jsonObject(with: Data(contentsOf: directory.appendingPathComponent("grafana-dashboard.json")))
        let panels = (dashboard as? [String: Any])?["panels"] as? [[String: Any]] ?? []
        let fromPanels = panels.flatMap { ($0["targets"] as? [[String: Any]] ?? []).compactMap { $0["expr"] as? String } }
        let rules = try Yams.load(yaml: String(contentsOf: directory.appendingPathComponent("prometheus-alerts.yaml"), encoding: .utf8))
        let groups = (rules as? [String: Any])?["groups"] as? [[String: Any]] ?? []
        let fromRules = groups.flatMap { ($0["rules"] as? [[String: Any]] ?? []).compactMap { $0["expr"] as? String } }
        #expect(fromPanels.count >= 10 && fromRules.count >= 5)
        return fromPanels + fromRules
    }

    /// The metric names in PromQL: Syncline's and the HTTP server's.
    static func metrics(in expressions: [String]) -> Set<String> {
        let words = expressions.flatMap { $0.split(whereSeparator: { !($0.isLetter || $0.isNumber || $0 == "_") }) }
        return Set(words.map(String.init).filter { $0.hasPrefix("syncline_") || $0.hasPrefix("hb_") || $0.hasPrefix("http_server_") })
    }

    @Test func everyMetricTheDashboardAndTheAlertsQueryIsExported() async throws {
        let used = Self.metrics(in: try Self.expressions())
        try await Stack.with(workers: 1, fanouts: 1) { stack in
            // One push, applied: the request metrics exist once a route has answered.
            let token = await E2E.token("dashboard-\(UUID().uuidString.prefix(8))")
            let device = try await stack.client.registerDevice(token)
            let pushed = try await stack.client.push(token, device: device, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": "n1", "data": ["n": 1]],
            ])
            _ = try await stack.client.awaitJob(token, try #require(pushed.json["job_id"] as? String))
            var exported: [String: String] = [:]  // name → type
            for process in [stack.gateway] + stack.workers + stack.fanouts {
                let text = try await APIClient(base: "http://127.0.0.1:\(process.port)").request("GET", "/metrics").text
                for line in text.split(separator: "\n") where line.hasPrefix("# TYPE ") {
                    let parts = line.split(separator: " ")
                    if parts.count == 4 { exported[String(parts[2])] = String(parts[3]) }
                }
            }
            let missing = used.filter { name in
                if exported[name] != nil { return false }
                // A histogram's series: name_bucket, name_sum, name_count.
                for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) {
                    if exported[String(name.dropLast(suffix.count))] == "histogram" { return false }
                }
                return true
            }
            #expect(missing.isEmpty, "queried but not exported: \(missing.sorted())")
            #expect(used.count >= 12, "\(used.sorted())")
        }
    }
}
