import Foundation
import Testing
import TestSupport

/// Headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`:
/// JSON messages separated by NUL on file descriptors 3 and 4), so a test can load a page,
/// type, click with real mouse events and take screenshots — no WebDriver, no WebSocket.
final class Browser: @unchecked Sendable {
    // @unchecked: used by one test at a time.
    private var pid: pid_t = 0
    private let toBrowser: Int32
    private let fromBrowser: Int32
    private var buffer: [UInt8] = []
    private var nextID = 1
    private var sessionID: String?
    private let profile: String

    static var executable: String? {
        ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"]
            .first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    init(width: Int = 1280, height: Int = 900) throws {
        guard let executable = Self.executable else { throw StackError(description: "chromium is not installed") }
        var input: [Int32] = [0, 0], output: [Int32] = [0, 0]
        guard pipe(&input) == 0, pipe(&output) == 0 else { throw StackError(description: "pipe failed") }
        toBrowser = input[1]
        fromBrowser = output[0]
        profile = NSTemporaryDirectory() + "syncline-chromium-\(UUID().uuidString.prefix(8))"
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, input[0], 3)
        posix_spawn_file_actions_adddup2(&actions, output[1], 4)
        posix_spawn_file_actions_addclose(&actions, input[1])
        posix_spawn_file_actions_addclose(&actions, output[0])
        let logPath = (E2E.environment["SYNCLINE_TEST_OUTPUT"] ?? NSTemporaryDirectory()) + "/chromium.log"
        posix_spawn_file_actions_addopen(&actions, 1, logPath, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_addopen(&actions, 2, logPath, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        let arguments = [
            executable, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--remote-debugging-pipe", "--user-data-dir=\(profile)",
            "--window-size=\(width),\(height)", "about:blank",
        ]
        let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let result = posix_spawn(&pid, executable, &actions, nil, argv, environ)
        close(input[0])
        close(output[1])
        guard result == 0 else { throw StackError(description: "cannot start chromium: \(result)") }
    }

    deinit { quit() }

    func quit() {
        guard pid != 0 else { return }
        _ = try? send("Browser.close", session: false, timeout: 5)
        var status: Int32 = 0
        for _ in 0..<50 where waitpid(pid, &status, WNOHANG) == 0 { usleep(100_000) }
        kill(pid, SIGKILL)
        waitpid(pid, &status, 0)
        pid = 0
        close(toBrowser)
        close(fromBrowser)
        try? FileManager.default.removeItem(atPath: profile)
    }

    /// Sends one DevTools command and waits for its answer (events in between are skipped).
    @discardableResult
    func send(_ method: String, _ params: [String: Any] = [:], session: Bool = true, timeout: Double = 20) throws -> [String: Any] {
        let id = nextID
        nextID += 1
        var message: [String: Any] = ["id": id, "method": method, "params": params]
        if session, let sessionID { message["sessionId"] = sessionID }
        var bytes = [UInt8](try JSONSerialization.data(withJSONObject: message))
        bytes.append(0)
        var written = 0
        while written < bytes.count {
            let n = bytes[written...].withUnsafeBytes { write(toBrowser, $0.baseAddress, $0.count) }
            guard n > 0 else { throw StackError(description: "chromium closed its pipe") }
            written += n
        }
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let reply = try readMessage(until: deadline)
            guard reply["id"] as? Int == id else { continue }
            if let error = reply["error"] as? [String: Any] { throw StackError(description: "\(method): \(error)") }
            return reply["result"] as? [String: Any] ?? [:]
        }
    }

    private func readMessage(until deadline: Date) throws -> [String: Any] {
        while true {
            if let end = buffer.firstIndex(of: 0) {
                let data = Data(buffer[..<end])
                buffer.removeSubrange(...end)
                return (try JSONSerialization.jsonObject(with: data)) as? [String: Any] ?? [:]
            }
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0 else { throw StackError(description: "chromium did not answer in time") }
            var descriptor = pollfd(fd: fromBrowser, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, Int32(min(remaining, 1) * 1000)) > 0 else { continue }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let n = read(fromBrowser, &chunk, chunk.count)
            guard n > 0 else { throw StackError(description: "chromium closed its pipe") }
            buffer.append(contentsOf: chunk[..<n])
        }
    }

    /// A tab of this browser (all of them share its profile: one origin, one IndexedDB).
    struct Tab {
        let targetID: String
        let sessionID: String
    }

    /// Opens a tab and drives it from now on.
    @discardableResult
    func open(_ url: String) throws -> Tab {
        let target = try send("Target.createTarget", ["url": "about:blank"], session: false)
        let targetID = target["targetId"] as? String ?? ""
        let attached = try send("Target.attachToTarget", ["targetId": targetID, "flatten": true], session: false)
        sessionID = attached["sessionId"] as? String
        try send("Page.enable")
        try send("Page.navigate", ["url": url])
        try waitFor("document.readyState === 'complete'")
        return Tab(targetID: targetID, sessionID: sessionID ?? "")
    }

    /// Loads `url` in the tab driven now, as a user typing it into the address bar.
    func navigate(_ url: String) throws {
        try send("Page.navigate", ["url": url])
        usleep(300_000)
        try waitFor("document.readyState === 'complete'")
    }

    /// Drives `tab` from now on.
    func use(_ tab: Tab) { sessionID = tab.sessionID }

    /// Closes `tab`, as a user closes it.
    func closeTab(_ tab: Tab) throws {
        try send("Target.closeTarget", ["targetId": tab.targetID], session: false)
        if sessionID == tab.sessionID { sessionID = nil }
    }

    /// Reloads the page, as a user would: everything the page ran is gone.
    func reload() throws {
        try send("Page.reload", ["ignoreCache": true])
        usleep(300_000)
        try waitFor("document.readyState === 'complete'")
    }

    /// Evaluates JavaScript in the page and returns its (JSON-able) value.
    /// Runs `expression` in the page and answers its value; `timeout`: how long the page may
    /// take (a script of thousands of IndexedDB writes takes several times longer on a loaded machine).
    func evaluate(_ expression: String, timeout: Double = 20) throws -> Any? {
        let result = try send("Runtime.evaluate", ["expression": expression, "returnByValue": true, "awaitPromise": true], timeout: timeout)
        if let exception = result["exceptionDetails"] { throw StackError(description: "page script failed: \(exception)") }
        return (result["result"] as? [String: Any])?["value"]
    }

    func waitFor(_ condition: String, within seconds: Double = 15) throws {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try evaluate("Boolean(\(condition))") as? Bool == true { return }
            usleep(100_000)
        }
        throw StackError(description: "the page never satisfied: \(condition)")
    }

    /// Clicks the element's centre with real mouse events, as a person would.
    func click(_ selector: String) throws {
        let json = try evaluate("""
            (() => { const e = document.querySelector(\(Self.quoted(selector))); if (!e) return null;
              e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();
              return JSON.stringify({x: r.left + r.width / 2, y: r.top + r.height / 2}); })()
            """) as? String
        guard let json, let point = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Double],
              let x = point["x"], let y = point["y"]
        else { throw StackError(description: "no element \(selector) to click") }
        for type in ["mouseMoved", "mousePressed", "mouseReleased"] {
            try send("Input.dispatchMouseEvent", ["type": type, "x": x, "y": y, "button": "left", "clickCount": 1])
        }
    }

    /// Types into the focused element.
    func type(into selector: String, _ text: String) throws {
        _ = try evaluate("document.querySelector(\(Self.quoted(selector))).focus()")
        try send("Input.insertText", ["text": text])
    }

    func screenshot(to path: String) throws {
        let shot = try send("Page.captureScreenshot", ["format": "png"])
        guard let base64 = shot["data"] as? String, let png = Data(base64Encoded: base64) else {
            throw StackError(description: "no screenshot data")
        }
        try png.write(to: URL(fileURLWithPath: path))
    }

    static func quoted(_ text: String) -> String {
        String(decoding: try! JSONSerialization.data(withJSONObject: [text]), as: UTF8.self).dropFirst().dropLast().description
    }
}
