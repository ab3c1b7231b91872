import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
import TestSupport
#endif

/// An HTTP proxy in front of the gateway that can swallow the answers to pushes: the push
/// reaches the gateway (its job is committed) but the client never hears back — the moment
/// a client is killed "right after sending a push". Records each push's Idempotency-Key and
/// the job the gateway answered with, and every exchange the client had. It can also send
/// a request to the gateway twice and answer with the second answer: a request whose
/// answer was lost, sent again.
final class SwallowingProxy: @unchecked Sendable {
    // @unchecked: the mutable state is guarded by `lock`.
    struct Push: Sendable {
        let idempotencyKey: String?
        let jobID: String?
    }

    let port: Int
    private let target: String
    private let listener: Int32
    private let lock = NSLock()
    private var swallowing = true
    private var seen: [Push] = []
    private var exchanged: [(method: String, path: String, status: Int)] = []
    /// The method whose request, after `repeatAfter` more of them, goes to the gateway twice.
    private var repeated: (method: String, after: Int)?

    init(target: String) throws {
        self.target = target
        guard let (fd, port) = Loopback.bind(), listen(fd, 16) == 0 else {
            throw StackError(description: "the proxy cannot listen")
        }
        listener = fd
        self.port = port
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    var pushes: [Push] { lock.withLock { seen } }
    /// What the client sent and the status it got, in order: "PATCH /v1/uploads/… 204".
    var exchanges: [(method: String, path: String, status: Int)] { lock.withLock { exchanged } }

    /// The request of `method` after the next `after` ones reaches the gateway twice; the
    /// client gets the second answer.
    func repeatNext(_ method: String, after: Int = 0) { lock.withLock { repeated = (method, after) } }
    func passThrough() { lock.withLock { swallowing = false } }
    func close() { shutdown(listener, Int32(SHUT_RDWR)); Glibc.close(listener) }

    private func acceptLoop() {
        while true {
            let connection = Loopback.accept(listener)
            guard connection >= 0 else { return }
            let thread = Thread { [self] in serve(connection) }
            thread.start()
        }
    }

    private func serve(_ connection: Int32) {
        defer { Glibc.close(connection) }
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        func fill() -> Bool {
            let count = chunk.withUnsafeMutableBytes { recv(connection, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { return false }
            buffer.append(contentsOf: chunk[..<count])
            return true
        }
        while true {
            var headEnd: Int?
            while headEnd == nil {
                headEnd = buffer.indices.dropLast(3).first { buffer[$0] == 13 && buffer[$0 + 1] == 10 && buffer[$0 + 2] == 13 && buffer[$0 + 3] == 10 }
                if headEnd == nil, !fill() { return }
            }
            let head = String(decoding: buffer[..<headEnd!], as: UTF8.self).split(separator: "\r\n")
            let requestLine = head.first?.split(separator: " ") ?? []
            var headers: [String: String] = [:]
            for line in head.dropFirst() {
                guard let colon = line.firstIndex(of: ":") else { continue }
                headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
            let length = Int(headers["content-length"] ?? "0") ?? 0
            while buffer.count < headEnd! + 4 + length { if !fill() { return } }
            let body = Data(buffer[(headEnd! + 4)..<(headEnd! + 4 + length)])
            buffer.removeFirst(headEnd! + 4 + length)
            guard requestLine.count >= 2 else { return }
            let method = String(requestLine[0]), path = String(requestLine[1])

            var request = URLRequest(url: URL(string: target + path)!)
            request.httpMethod = method
            request.httpBody = length > 0 ? body : nil
            for (name, value) in headers where !["host", "content-length", "connection"].contains(name) {
                request.setValue(value, forHTTPHeaderField: name)
            }
            let twice: Bool = lock.withLock {
                guard let rule = repeated, rule.method == method else { return false }
                if rule.after > 0 {
                    repeated = (method, rule.after - 1)
                    return false
                }
                repeated = nil
                return true
            }
            if twice { _ = Self.forward(request) }
            let (status, answer, answerHeaders) = Self.forward(request)
            lock.withLock { exchanged.append((method, path, status)) }
            if method == "POST" && path == "/v1/sync/push" {
                let jobID = (try? JSONSerialization.jsonObject(with: answer)) .flatMap { $0 as? [String: Any] }?["job_id"] as? String
                let swallow = lock.withLock {
                    seen.append(Push(idempotencyKey: headers["idempotency-key"], jobID: jobID))
                    return swallowing
                }
                if swallow {
                    while fill() {}  // hold the connection until the client goes away
                    return
                }
            }
            // The gateway's headers go through (CORS ones included, for a page behind the proxy).
            let passed = answerHeaders.filter { !["content-length", "transfer-encoding", "connection", "content-encoding"].contains($0.key.lowercased()) }
                .map { "\($0.key): \($0.value)\r\n" }.joined()
            var response = Array("HTTP/1.1 \(status) X\r\n\(passed)Content-Length: \(answer.count)\r\n\r\n".utf8)
            response.append(contentsOf: answer)
            _ = response.withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }
    }

    private static func forward(_ request: URLRequest) -> (Int, Data, [String: String]) {
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var result: (Int, Data, [String: String]) = (502, Data(), [:])
        URLSession.shared.dataTask(with: request) { data, response, _ in
            let http = response as? HTTPURLResponse
            let headers = (http?.allHeaderFields ?? [:]).reduce(into: [String: String]()) { $0["\($1.key)"] = "\($1.value)" }
            result = (http?.statusCode ?? 502, data ?? Data(), headers)
            done.signal()
        }.resume()
        done.wait()
        return result
    }
}
