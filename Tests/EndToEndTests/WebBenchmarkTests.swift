import Foundation
import Testing
import TestSupport

/// SynclineWeb's benchmark (`Shared/SynclineWeb/bench`, what `scripts/bench-web` runs) at a
/// small size in headless Chromium against the real stack: every phase must finish with
/// the data it promised, and its figures — each beside its bare-IndexedDB floor from the
/// same run, and against its target — go to `web-benchmark.log` in the test output folder
/// (its lane's, `test-output/lane-N/`, under `scripts/test`), which `scripts/test` prints. Figures are not asserted: a loaded machine moves them.
@Suite(.serialized, .timeLimit(.minutes(10)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct WebBenchmarkTests {
    @Test func theBenchmarkRunsAndPrintsTheClientBesideItsFloor() async throws {
        let site = try await WebClientTests.servePackage(["dist", "bench"])
        defer { site.stop() }
        let environment = ["CORS_ALLOWED_ORIGINS": site.base, "RATE_LIMIT_PUSH": "off"]
        try await Stack.with(workers: 2, fanouts: 1, environment: environment) { stack in
            let token = await Tokens.make("webbench-\(UUID().uuidString.prefix(6))", seconds: 7200)
            let browser = try Browser()
            defer { browser.quit() }
            let records = 2_000, ops = 500, burst = 500
            _ = try browser.open("\(site.base)/bench/index.html?gateway=\(stack.client.base)&fanout=http://127.0.0.1:\(stack.fanouts[0].port)"
                + "&token=\(token)&records=\(records)&ops=\(ops)&burst=\(burst)")
            let deadline = Date().addingTimeInterval(480)
            var result: String?
            while result == nil, Date() < deadline {
                try await Task.sleep(for: .seconds(1))
                if let error = try browser.evaluate("window.benchError ?? null") as? String { Issue.record("the benchmark failed: \(error)"); return }
                result = try browser.evaluate("window.benchResult ?? null") as? String
            }
            guard let result else { Issue.record("the benchmark did not finish within 8 minutes"); return }
            let output = (E2E.environment["SYNCLINE_TEST_OUTPUT"] ?? NSTemporaryDirectory()) + "/web-benchmark.log"
            try result.write(toFile: output, atomically: true, encoding: .utf8)
            print(result)
            // What each phase promised, checked by the page (an initial sync short of the
            // server's records throws): here, that every phase and verdict was reached.
            #expect(result.contains("drain: \(ops) ops pushed, applied and pulled back"))
            #expect(result.contains("initial sync: \(records) records into IndexedDB"))
            #expect(result.contains("online burst: \(burst) writes"))
            #expect(result.split(separator: "\n").filter { $0.hasPrefix("within") || $0.hasPrefix("OVER") }.count == 4)
        }
    }
}
