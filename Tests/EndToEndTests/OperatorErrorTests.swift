import Foundation
import Testing
import TestSupport

/// What an operator meets when a service cannot start, run as processes the way an operator
/// runs them: one line naming the cause, exit status 1, and `scripts/up` stopping all it
/// started on SIGTERM.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct OperatorErrorTests {
    static func output(of process: ServiceProcess) -> String {
        (try? String(contentsOfFile: process.logPath, encoding: .utf8)) ?? ""
    }

    /// DATABASE_URL naming a database that does not exist.
    static var missingDatabaseURL: (url: String, name: String) {
        let name = "syncline_missing_\(UUID().uuidString.prefix(6).lowercased())"
        var url = E2E.databaseURL!
        if let slash = url.lastIndex(of: "/") { url = String(url[...slash]) + name }
        return (url, name)
    }

    @Test(arguments: ["gateway", "worker", "fanout"])
    func aTakenPortIsOneLineNamingItAndExitStatusOne(service: String) throws {
        let (listener, port) = try #require(Loopback.bind())
        defer { close(listener) }
        #expect(listen(listener, 4) == 0)
        let process = try ServiceProcess(executable: service, name: "\(service)-taken", port: port, environment: [:])
        let status = process.exitStatus(within: 30)
        process.stop(within: 1)
        let output = Self.output(of: process)
        #expect(status == 1, "\(service) exited with \(String(describing: status)): \(output)")
        let last = output.split(separator: "\n").last.map(String.init) ?? ""
        #expect(last == "\(service): port \(port) is already in use: stop what listens there, or set PORT to another port")
        #expect(!output.contains("Fatal error") && !output.contains("Backtrac") && !output.contains("crashed"), "\(output)")
    }

    @Test func migrateNamesAMissingDatabase() throws {
        let (url, name) = Self.missingDatabaseURL
        let process = try ServiceProcess(executable: "syncctl migrate", name: "migrate-missing", port: 1, environment: ["DATABASE_URL": url])
        let status = process.exitStatus(within: 30)
        process.stop(within: 1)
        let output = Self.output(of: process)
        #expect(status != nil && status != 0)
        #expect(output.contains("database \"\(name)\" does not exist"), "\(output)")
    }

    /// A service whose database or broker cannot be reached keeps running (not ready) and
    /// logs the library's own reason.
    @Test func servicesLogWhyTheDatabaseAndTheBrokerCannotBeReached() async throws {
        let (url, name) = Self.missingDatabaseURL
        let closed = E2E.freePort()  // nothing listens there
        let gateway = try ServiceProcess(
            executable: "gateway", name: "gateway-unreachable", port: E2E.freePort(),
            environment: ["DATABASE_URL": url, "AMQP_URL": "amqp://guest:guest@127.0.0.1:\(closed)/"])
        defer { gateway.stop(within: 5) }
        let probe = APIClient(base: "http://127.0.0.1:\(gateway.port)")
        let logged = try await eventually(within: 30, "both reasons in the gateway's log") { () -> String? in
            _ = try? await probe.request("GET", "/readyz")  // checks both, so tries to connect to both
            let output = Self.output(of: gateway)
            // The reason is a log value, quoted with its own quotes escaped.
            return output.contains(#"database \"\#(name)\" does not exist"#) && output.contains("cannot reach 127.0.0.1:\(closed)") ? output : nil
        }
        #expect(!logged.isEmpty)
        #expect(try await probe.request("GET", "/readyz").status == 503)
    }

    @Test func scriptsUpStopsEverythingItStartedOnSIGTERM() async throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
        let port = try #require(Self.freePortRange(13), "no 13 free ports in a row")
        let up = try ServiceProcess(
            executable: "\(root)/scripts/up", name: "scripts-up", port: port,
            environment: ["WORKERS": "1", "SYNCLINE_BIN": E2E.binaries.hasPrefix("/") ? E2E.binaries : "\(root)/\(E2E.binaries)"])
        let probe = APIClient(base: "http://127.0.0.1:\(port)")
        _ = try await eventually(within: 90, "scripts/up's gateway") {
            up.hasExited ? nil : try await probe.request("GET", "/readyz").status == 200 ? true : nil
        }
        for service in [port + 1, port + 2, port + 11] {
            _ = try await eventually(within: 30, "service on \(service)") {
                try await APIClient(base: "http://127.0.0.1:\(service)").request("GET", "/healthz").status == 200 ? true : nil
            }
        }
        let started = Self.descendants(of: up.pid)
        #expect(started.count >= 4, "gateway, worker, fanout and purge: \(started)")
        up.signal(SIGTERM)
        #expect(up.exitStatus(within: 20) != nil, "scripts/up did not exit: \(up.logTail())")
        // Its last child (the gateway's log tee) ends once the gateway closed its output.
        let running = { started.filter { kill($0, 0) == 0 && !Self.isZombie($0) } }
        for _ in 0..<50 where !running().isEmpty { try await Task.sleep(for: .milliseconds(100)) }
        let alive = running()
        #expect(alive.isEmpty, "left running after SIGTERM: \(alive.map { Self.command(of: $0) })")
        for pid in alive { kill(pid, SIGKILL) }
    }

    /// A port p such that p…p+count-1 are all free.
    static func freePortRange(_ count: Int) -> Int? {
        for _ in 0..<50 {
            let base = Int.random(in: 20_000..<31_000)
            let sockets = (0..<count).compactMap { Loopback.bind(port: base + $0) }
            sockets.forEach { close($0.fd) }
            if sockets.count == count { return base }
        }
        return nil
    }

    /// Every process below `pid`, from /proc.
    static func descendants(of pid: pid_t) -> [pid_t] {
        let all = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap { pid_t($0) }
        var parent: [pid_t: pid_t] = [:]
        for candidate in all {
            guard let stat = try? String(contentsOfFile: "/proc/\(candidate)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { continue }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 1, let ppid = pid_t(fields[1]) { parent[candidate] = ppid }
        }
        return all.filter { candidate in
            var current = parent[candidate]
            while let step = current, step > 1 {
                if step == pid { return true }
                current = parent[step]
            }
            return false
        }
    }

    static func isZombie(_ pid: pid_t) -> Bool {
        let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
        guard let close = stat.lastIndex(of: ")") else { return true }
        return stat[stat.index(after: close)...].split(separator: " ").first == "Z"
    }

    static func command(of pid: pid_t) -> String {
        ((try? String(contentsOfFile: "/proc/\(pid)/cmdline", encoding: .utf8)) ?? "?").replacingOccurrences(of: "\0", with: " ")
    }
}
