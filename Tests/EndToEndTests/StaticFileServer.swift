import Foundation
import TestSupport

/// A real HTTP server for files in a temporary folder (Python's `http.server` on
/// loopback): the test identity provider's JWKS, a page on another origin. `stop()` ends it.
final class StaticFileServer: Sendable {
    let directory: String
    let port: Int
    /// Where the server logs every request it answers.
    let log: String
    private let process: ShellProcess

    init() async throws {
        directory = NSTemporaryDirectory() + "syncline-static-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        port = E2E.freePort()
        log = (E2E.environment["SYNCLINE_TEST_OUTPUT"] ?? NSTemporaryDirectory()) + "/static-\(port).log"
        process = try ShellProcess(
            "exec python3 -m http.server \(port) --bind 127.0.0.1 --directory \(directory) >>\(log) 2>&1", what: "python3 http.server")
        try write("ready.txt", "ok")
        let base = "http://127.0.0.1:\(port)"
        _ = try await eventually(within: 15, "static server") {
            try await APIClient(base: base).request("GET", "/ready.txt").status == 200 ? true : nil
        }
    }

    var base: String { "http://127.0.0.1:\(port)" }

    func write(_ name: String, _ text: String) throws {
        // Write then rename, so the server never serves half a file.
        let target = URL(fileURLWithPath: "\(directory)/\(name)")
        let temporary = target.deletingLastPathComponent().appendingPathComponent(".\(target.lastPathComponent).tmp").path
        try text.write(toFile: temporary, atomically: false, encoding: .utf8)
        _ = rename(temporary, target.path)
    }

    /// The paths asked for so far, in order.
    var requestedPaths: [String] {
        let lines = (try? String(contentsOfFile: log, encoding: .utf8))?.split(separator: "\n") ?? []
        return lines.compactMap { line in
            guard let start = line.range(of: "\"GET ")?.upperBound, let end = line[start...].firstIndex(of: " ") else { return nil }
            return String(line[start..<end])
        }
    }

    func stop() { process.stop() }
}
