import AMQPBridge
import Auth
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import BrokerTopology
import Logging
import PQBridge
import ServiceSupport
import Testing
import TestSupport

enum E2E {
    static let environment = ProcessInfo.processInfo.environment
    static let databaseURL = environment["DATABASE_URL"]
    static let amqpURL = environment["AMQP_URL"]
    static let binaries = environment["SYNCLINE_BIN"] ?? ".build/debug"
    static var enabled: Bool {
        databaseURL != nil && amqpURL != nil && FileManager.default.isExecutableFile(atPath: binaries + "/gateway")
    }
    static let secret = Tokens.secret
    /// Short retry tiers and attempts, so failure tests finish in seconds (configuration,
    /// not code: the services read these like any deployment would).
    static let retryDelays: [Double] = [0.3, 0.6, 1.2]
    static let maxAttempts = 4
    /// What every service process starts with: `TestSettings.services` and these tiers.
    static let serviceDefaults = TestSettings.services.merging([
        "RETRY_DELAYS": "300ms,600ms,1200ms", "MAX_ATTEMPTS": String(maxAttempts),
    ]) { $1 }
    static let topology = SynclineTopology.topology(retryDelays: retryDelays)
    static let logger: Logger = {
        var logger = Logger(label: "e2e")
        logger.logLevel = .warning
        return logger
    }()

    static func token(_ user: String, admin: Bool = false, support: Bool = false, name: String? = nil) async -> String {
        await Tokens.make(user, admin: admin, support: support, name: name)
    }

    /// A port free on 127.0.0.1, below Linux's ephemeral range (32768–60999): the source
    /// ports of outgoing connections (to PostgreSQL, RabbitMQ, …) come from that range and
    /// could take a port there before the service that was given it binds it.
    static func freePort() -> Int {
        for _ in 0..<100 {
            if let (fd, port) = Loopback.bind(port: Int.random(in: 20_000..<32_000)) {
                close(fd)
                return port
            }
        }
        guard let (fd, port) = Loopback.bind() else { return 0 }
        close(fd)
        return port
    }

    /// Whether `body` finishes within `seconds`. A body that never finishes is left behind
    /// (its task leaks) so that a hang fails the test instead of stalling the whole run.
    static func finishes(within seconds: Double, _ body: @escaping @Sendable () async -> Void) async -> Bool {
        let answered = Flag()
        return await withCheckedContinuation { continuation in
            Task { await body(); if answered.set() { continuation.resume(returning: true) } }
            Task {
                try? await Task.sleep(for: .seconds(seconds))
                if answered.set() { continuation.resume(returning: false) }
            }
        }
    }
}

struct StackError: Error, CustomStringConvertible {
    let description: String
}

/// One running service process, its output in a log file under test-output/.
final class ServiceProcess: @unchecked Sendable {
    // @unchecked: used by one test at a time; `pid` is written once in init.
    let name: String
    let port: Int
    private(set) var pid: pid_t = 0
    private var exitCode: Int32?
    private var terminated = false
    let logPath: String

    init(executable: String, name: String, port: Int, environment: [String: String]) throws {
        self.name = name
        self.port = port
        let outputDirectory = E2E.environment["SYNCLINE_TEST_OUTPUT"] ?? NSTemporaryDirectory()
        self.logPath = "\(outputDirectory)/\(name)-\(port).log"
        var env = E2E.environment
        env["PORT"] = String(port)
        env["LOG_LEVEL"] = env["E2E_LOG_LEVEL"] ?? "info"
        for (key, value) in E2E.serviceDefaults.merging(environment, uniquingKeysWith: { $1 }) { env[key] = value }
        // A path runs as given (a script); a name is one of the built executables.
        let path = executable.hasPrefix("/") ? executable : "\(E2E.binaries)/\(executable)"
        let command = "exec \(path) >>\(logPath) 2>&1"
        let arguments: [String] = ["/bin/sh", "-c", command]
        let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        // Started as from a shell: no signal blocked or ignored (the test process may block
        // or ignore some, and a child inherits that — a script could then never trap SIGTERM).
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t(), all = sigset_t()
        sigemptyset(&none)
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let result = posix_spawn(&pid, "/bin/sh", nil, &attributes, argv, envp)
        guard result == 0 else { throw StackError(description: "cannot start \(executable): \(result)") }
    }

    func signal(_ signal: Int32) { kill(pid, signal) }

    /// Whether the process has exited (it is then reaped, and `stop` returns its code).
    var hasExited: Bool {
        if exitCode != nil { return true }
        var status: Int32 = 0
        guard waitpid(pid, &status, WNOHANG) == pid else { return false }
        exitCode = (status >> 8) & 0xff
        return true
    }

    /// The exit status once the process has exited by itself, waiting up to `seconds`; nil
    /// when it is still running then.
    func exitStatus(within seconds: Double) -> Int32? {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if hasExited { return exitCode }
            usleep(50_000)
        }
        return hasExited ? exitCode : nil
    }

    /// Waits up to `seconds` for `/readyz` to answer 200 from this process (not another that
    /// holds its port): true when it does, false when the process exits first; throws (with
    /// the process's last output) on a timeout.
    func waitUntilReady(within seconds: Double = 30) async throws -> Bool {
        let probe = APIClient(base: "http://127.0.0.1:\(port)")
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if hasExited { return false }
            if (try? await probe.request("GET", "/readyz").status) == 200, Loopback.isListening(pid: pid, port: port) { return true }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw StackError(description: "\(name) on port \(port) not ready after \(seconds) s: \(logTail())")
    }

    /// Starts `executable` and waits until it is ready. Without a fixed `port` it takes a
    /// free one; another socket can take that port between `freePort` and the service's
    /// bind, and the service then exits, so it is started again on another port.
    static func launch(_ executable: String, port fixed: Int? = nil, environment: [String: String]) async throws -> ServiceProcess {
        for attempt in 1...3 {
            let process = try ServiceProcess(
                executable: executable, name: executable, port: fixed ?? E2E.freePort(), environment: environment)
            let ready: Bool
            do { ready = try await process.waitUntilReady() } catch {
                process.stop(within: 1)
                throw error
            }
            if ready { return process }
            let output = (try? String(contentsOfFile: process.logPath, encoding: .utf8)) ?? ""
            // The service says so itself ("port N is already in use"); an older build let the bind's error through.
            guard fixed == nil, attempt < 3, output.contains("is already in use") || output.contains("Address already in use") else {
                let said = output.split(separator: "\n").first { $0.contains("Fatal error") } ?? ""
                throw StackError(description: "\(executable) exited before it was ready: \(said) … \(process.logTail())")
            }
        }
        preconditionFailure("unreachable: the last attempt returns or throws")
    }

    /// The last `count` lines of the process's output, on one line (for a failure message).
    func logTail(_ count: Int = 15) -> String {
        let text = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").suffix(count).joined(separator: " | ")
    }

    /// Sends SIGTERM, once.
    func terminate() {
        guard !terminated else { return }
        terminated = true
        kill(pid, SIGTERM)
    }

    /// Sends SIGTERM and waits up to `seconds` for the process to exit; returns its exit code.
    @discardableResult
    func stop(within seconds: Double = 15) -> Int32? {
        if let exitCode { return exitCode }
        terminate()
        let deadline = Date().addingTimeInterval(seconds)
        var status: Int32 = 0
        while Date() < deadline {
            if waitpid(pid, &status, WNOHANG) == pid {
                exitCode = (status >> 8) & 0xff
                return exitCode
            }
            usleep(50_000)
        }
        kill(pid, SIGKILL)
        waitpid(pid, &status, 0)
        exitCode = -9
        return nil
    }
}

/// What a test reaches a stack by, in processes of its own (`Stack`) or in the test's
/// (`InProcessStack`): the gateway's client and port, and the fanouts' ports.
protocol TestStack: Sendable {
    var client: APIClient { get }
    /// The gateway's port.
    var port: Int { get }
    /// Each fanout's port.
    var fanoutPorts: [Int] { get }
}

/// A gateway and workers, started as real processes for one test.
final class Stack: TestStack, @unchecked Sendable {
    // @unchecked: the process list is set up before the stack is shared and only read after.
    private(set) var gateway: ServiceProcess
    var workers: [ServiceProcess]
    var fanouts: [ServiceProcess] = []
    let client: APIClient
    let environment: [String: String]
    var port: Int { gateway.port }
    var fanoutPorts: [Int] { fanouts.map(\.port) }

    /// Starts every process at once (none waits for another to be ready); when one fails,
    /// the others are stopped.
    init(workers count: Int = 2, fanouts fanoutCount: Int = 0, environment: [String: String] = [:]) async throws {
        self.environment = environment
        let launched = await withTaskGroup(of: Result<ServiceProcess, any Error>.self) { group in
            for executable in ["gateway"] + Array(repeating: "worker", count: count) + Array(repeating: "fanout", count: fanoutCount) {
                group.addTask {
                    do { return .success(try await ServiceProcess.launch(executable, environment: environment)) }
                    catch { return .failure(error) }
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        let processes = launched.compactMap { try? $0.get() }
        for case .failure(let error) in launched {
            Self.stop(processes)
            throw error
        }
        gateway = processes.first { $0.name == "gateway" }!
        workers = processes.filter { $0.name == "worker" }
        fanouts = processes.filter { $0.name == "fanout" }
        client = APIClient(base: "http://127.0.0.1:\(gateway.port)")
    }

    /// Starts one more fanout (on `port`, or a free one) and waits until it is ready.
    @discardableResult
    func addFanout(port: Int? = nil) async throws -> ServiceProcess {
        let fanout = try await ServiceProcess.launch("fanout", port: port, environment: environment)
        fanouts.append(fanout)
        return fanout
    }

    /// Starts another gateway on the same port (after the first one was killed).
    func replaceGateway(environment: [String: String]? = nil) async throws {
        gateway.stop(within: 1)
        gateway = try await ServiceProcess.launch("gateway", port: gateway.port, environment: environment ?? self.environment)
    }

    /// Starts one more worker and waits until it is ready.
    func addWorker() async throws {
        workers.append(try await ServiceProcess.launch("worker", environment: environment))
    }

    /// Stops every process; returns their exit codes (nil when one had to be killed).
    @discardableResult
    func stop() -> [Int32?] {
        Self.stop(fanouts + workers + [gateway])
    }

    /// Signals every process first, then waits for each: they shut down side by side.
    @discardableResult
    static func stop(_ processes: [ServiceProcess]) -> [Int32?] {
        processes.forEach { $0.terminate() }
        return processes.map { $0.stop() }
    }

    /// Runs `body` with a fresh stack and always stops it.
    static func with<T>(
        workers: Int = 2, fanouts: Int = 0, environment: [String: String] = [:], _ body: (Stack) async throws -> T
    ) async throws -> T {
        let stack = try await Stack(workers: workers, fanouts: fanouts, environment: environment)
        return try await withCleanup { try await body(stack) } cleanup: { stack.stop() }
    }
}



/// The latest state of each record from a list of changes in pull order.
func latestState(_ changes: [[String: Any]]) -> [String: [String: Any]] {
    var state: [String: [String: Any]] = [:]
    for change in changes {
        state["\(change["collection"]!)/\(change["id"]!)"] = change
    }
    return state
}

extension PGPool {
    /// The one value a statement answers (a count, say), or nil when it gives no row.
    func value<Value: PGDecodable>(_ query: PGQuery, as _: Value.Type = Int.self) async throws -> Value? {
        try await execute(query).first?.decode(Value.self, at: 0)
    }
}
