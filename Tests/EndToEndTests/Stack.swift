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
    static let secret = environment["JWT_SECRET"] ?? "syncline-test-secret-0123456789abcdef"
    /// Short retry tiers and attempts, so failure tests finish in seconds (configuration,
    /// not code: the services read these like any deployment would).
    static let retryDelays: [Double] = [0.3, 0.6, 1.2]
    static let maxAttempts = 4
    /// Rate limits are off unless a test sets them: load tests push as fast as they can.
    static let serviceDefaults = [
        "RETRY_DELAYS": "300ms,600ms,1200ms", "MAX_ATTEMPTS": String(maxAttempts), "RELAY_AFTER": "1s",
        "RATE_LIMIT_PUSH": "off", "RATE_LIMIT_STREAMS": "off", "RATE_LIMIT_PUBLIC": "off",
        "RATE_LIMIT_PUBLIC_IDS": "off",
    ]
    static let topology = SynclineTopology.topology(retryDelays: retryDelays)
    static let logger: Logger = {
        var logger = Logger(label: "e2e")
        logger.logLevel = .warning
        return logger
    }()

    static func token(_ user: String, admin: Bool = false, name: String? = nil) async -> String {
        try! await TokenMinter(secret: secret).sign(
            Claims(sub: user, exp: Int64(Date().timeIntervalSince1970) + 3600, role: admin ? "admin" : nil, name: name))
    }

    /// A port free on 127.0.0.1, below Linux's ephemeral range (32768–60999): the source
    /// ports of outgoing connections (to PostgreSQL, RabbitMQ, …) come from that range and
    /// could take a port there before the service that was given it binds it.
    static func freePort() -> Int {
        for _ in 0..<100 {
            if let (fd, port) = bindLoopback(port: Int.random(in: 20_000..<32_000)) {
                close(fd)
                return port
            }
        }
        guard let (fd, port) = bindLoopback() else { return 0 }
        close(fd)
        return port
    }

    /// A TCP socket bound to 127.0.0.1 on `port` (0: one the kernel picks), and that port;
    /// the caller listens on it or closes it. Close-on-exec: a service process spawned by
    /// another test task meanwhile must not inherit it (it would hold the port that a
    /// service started next is given, and that service could not bind it).
    static func bindLoopback(port: Int = 0) -> (fd: Int32, port: Int)? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        guard bound else {
            close(fd)
            return nil
        }
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }

    /// The next connection on `listener` (-1 when it fails), close-on-exec like the listener.
    static func accept(_ listener: Int32) -> Int32 {
        let connection = Glibc.accept(listener, nil, nil)
        if connection >= 0 { _ = fcntl(connection, F_SETFD, FD_CLOEXEC) }
        return connection
    }

    /// A TCP connection to 127.0.0.1:`port`, or nil; the caller closes it. With
    /// `receiveBuffer`, the kernel keeps at most about that much of what the server sends
    /// until it is read.
    static func connectLoopback(port: Int, receiveBuffer: Int32? = nil) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        if var size = receiveBuffer { setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size)) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            return nil
        }
        return fd
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

/// A flag one task sets and others read.
final class Flag: @unchecked Sendable {
    // @unchecked: `value` is read and written under `lock` only.
    private let lock = NSLock()
    private var value = false
    var isSet: Bool { lock.withLock { value } }
    /// Sets the flag; true when this call is the one that set it.
    @discardableResult func set() -> Bool { lock.withLock { defer { value = true }; return !value } }
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

    /// Waits up to `seconds` for `/readyz` to answer 200: true when it does, false when the
    /// process exits first; throws (with the process's last output) on a timeout.
    func waitUntilReady(within seconds: Double = 30) async throws -> Bool {
        let probe = APIClient(base: "http://127.0.0.1:\(port)")
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if hasExited { return false }
            if (try? await probe.request("GET", "/readyz").status) == 200 { return true }
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
            guard fixed == nil, attempt < 3, output.contains("Address already in use") else {
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

/// A gateway and workers, started as real processes for one test.
final class Stack: @unchecked Sendable {
    // @unchecked: the process list is set up before the stack is shared and only read after.
    private(set) var gateway: ServiceProcess
    var workers: [ServiceProcess]
    var fanouts: [ServiceProcess] = []
    let client: APIClient
    let environment: [String: String]

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
        do {
            let value = try await body(stack)
            stack.stop()
            return value
        } catch {
            stack.stop()
            throw error
        }
    }
}

struct HTTPResult: Sendable {
    let status: Int
    let headers: [String: String]
    let body: Data

    var json: [String: Any] { (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] ?? [:] }
    var text: String { String(decoding: body, as: UTF8.self) }
    func header(_ name: String) -> String? {
        headers.first { $0.key.lowercased() == name.lowercased() }?.value
    }
}

struct APIClient: Sendable {
    let base: String

    func request(_ method: String, _ path: String, token: String? = nil, body: Data? = nil, headers: [String: String] = [:]) async throws -> HTTPResult {
        var request = URLRequest(url: URL(string: base + path)!)
        request.httpMethod = method
        request.httpBody = body
        request.timeoutInterval = 30
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        if body != nil { request.setValue("application/json", forHTTPHeaderField: "Content-Type") }
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let (data, response) = try await URLSession.shared.data(for: request)
        let http = response as! HTTPURLResponse
        var fields: [String: String] = [:]
        for (key, value) in http.allHeaderFields { fields["\(key)"] = "\(value)" }
        return HTTPResult(status: http.statusCode, headers: fields, body: data)
    }

    func json(_ method: String, _ path: String, token: String?, _ object: Any, headers: [String: String] = [:]) async throws -> HTTPResult {
        try await request(method, path, token: token, body: try JSONSerialization.data(withJSONObject: object), headers: headers)
    }

    func registerDevice(_ token: String, name: String = "device") async throws -> String {
        let result = try await json("POST", "/v1/devices", token: token, ["name": name, "platform": "ios"])
        guard result.status == 201, let id = result.json["device_id"] as? String else {
            throw StackError(description: "device registration answered \(result.status): \(result.text)")
        }
        return id
    }

    func push(_ token: String, device: String, ops: [[String: Any]], headers: [String: String] = [:]) async throws -> HTTPResult {
        try await json("POST", "/v1/sync/push", token: token, ["device_id": device, "ops": ops], headers: headers)
    }

    /// Waits until the job is terminal and returns its view.
    func awaitJob(_ token: String, _ jobID: String, within seconds: Double = 30) async throws -> [String: Any] {
        try await eventually(within: seconds, "job \(jobID)") {
            let job = try await request("GET", "/v1/sync/jobs/\(jobID)", token: token).json
            let status = job["status"] as? String
            return ["succeeded", "dead", "discarded"].contains(status ?? "") ? job : nil
        }
    }

    /// Pulls from `since` until has_more is false; returns every change and the final cursor.
    func pullAll(
        _ token: String, since: String? = nil, limit: Int = 7, space: String? = nil, minCursor: String? = nil
    ) async throws -> (changes: [[String: Any]], cursor: String) {
        var cursor = since
        var changes: [[String: Any]] = []
        while true {
            let query = "/v1/sync/pull?limit=\(limit)" + (space.map { "&space_id=\($0)" } ?? "") + (cursor.map { "&since=\($0)" } ?? "")
                + (minCursor.map { "&min_cursor=\($0)" } ?? "")
            let page = try await request("GET", query, token: token)
            guard page.status == 200 else { throw StackError(description: "pull answered \(page.status): \(page.text)") }
            let json = page.json
            changes += json["changes"] as? [[String: Any]] ?? []
            cursor = json["cursor"] as? String
            if json["has_more"] as? Bool != true { return (changes, cursor ?? "0") }
        }
    }
}

func newOpID() -> String { UUID().uuidString.lowercased() }

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
