import Foundation
import HummingbirdWSClient
import Logging
import NIOConcurrencyHelpers

/// Messages a stream client received, with when.
final class Inbox: @unchecked Sendable {
    // @unchecked: every stored value sits behind a lock; the JSON objects are never mutated.
    private let box = NIOLockedValueBox<[(at: Date, message: [String: Any])]>([])
    private let finishedBox = NIOLockedValueBox(false)

    func add(_ text: String) {
        guard let object = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] else { return }
        box.withLockedValue { $0.append((Date(), object)) }
    }

    func finish() { finishedBox.withLockedValue { $0 = true } }
    var finished: Bool { finishedBox.withLockedValue { $0 } }

    var messages: [[String: Any]] { box.withLockedValue { $0.map(\.message) } }
    func of(type: String) -> [(at: Date, message: [String: Any])] {
        box.withLockedValue { $0.filter { $0.message["type"] as? String == type } }
    }

    /// Waits until a message of `type` arrives (after the `count` already seen); returns it.
    func next(_ type: String, after count: Int = 0, within seconds: Double = 5) async throws -> (at: Date, message: [String: Any]) {
        try await E2E.eventually(within: seconds, "a \(type) message") {
            let found = of(type: type)
            return found.count > count ? found[count] : nil
        }
    }
}

/// A Server-Sent Events client on a plain socket: connects, sends the request, and reads
/// `data:` lines on its own thread until the server closes or `close()` is called.
final class SSEClient: @unchecked Sendable {
    // @unchecked: `fd` is set once; the reader thread only reads.
    let inbox = Inbox()
    private let statusBox = NIOLockedValueBox(0)
    private var fd: Int32 = -1

    init(port: Int, path: String) throws {
        guard let socketFD = E2E.connectLoopback(port: port) else { throw StackError(description: "cannot connect to :\(port)") }
        fd = socketFD
        let request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n"
        _ = request.withCString { send(socketFD, $0, strlen($0), 0) }
        let fd = socketFD, inbox = self.inbox, statusBox = self.statusBox
        let thread = Thread {
            var pending = ""
            var buffer = [UInt8](repeating: 0, count: 8192)
            var headersDone = false
            while true {
                let n = recv(fd, &buffer, buffer.count, 0)
                if n <= 0 { break }
                pending += String(decoding: buffer[..<n], as: UTF8.self)
                if !headersDone, let end = pending.range(of: "\r\n\r\n") {
                    let statusLine = pending[..<end.lowerBound].split(separator: "\r\n").first ?? ""
                    statusBox.withLockedValue { $0 = Int(statusLine.split(separator: " ").dropFirst().first ?? "") ?? 0 }
                    pending = String(pending[end.upperBound...])
                    headersDone = true
                }
                guard headersDone else { continue }
                // Chunked encoding: keep only the event lines. ("\r\n" is one Character.)
                while let newline = pending.firstIndex(where: \.isNewline) {
                    let line = pending[..<newline].trimmingCharacters(in: .whitespacesAndNewlines)
                    pending = String(pending[pending.index(after: newline)...])
                    if line.hasPrefix("data: ") { inbox.add(String(line.dropFirst(6))) }
                    // The last chunk: the server ended the stream (the connection may stay open).
                    if line == "0" { inbox.finish() }
                }
            }
            inbox.finish()
        }
        thread.start()
    }

    var httpStatus: Int { statusBox.withLockedValue { $0 } }

    func close() {
        if fd >= 0 {
            shutdown(fd, Int32(SHUT_RDWR))
            Glibc.close(fd)
            fd = -1
        }
    }

    deinit { close() }
}

/// A WebSocket client (HummingbirdWSClient) collecting text messages until `close()`.
final class WSClient: Sendable {
    let inbox = Inbox()
    private let task: Task<Void, Never>
    private let stop = NIOLockedValueBox(false)

    init(port: Int, path: String) {
        let inbox = self.inbox, stop = self.stop
        var logger = Logger(label: "ws-client")
        logger.logLevel = .warning
        task = Task {
            _ = try? await WebSocketClient.connect(url: "ws://127.0.0.1:\(port)\(path)", logger: logger) { inbound, outbound, _ in
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        for try await message in inbound.messages(maxSize: 1 << 20) {
                            if case .text(let text) = message { inbox.add(text) }
                        }
                    }
                    group.addTask {
                        while !stop.withLockedValue({ $0 }) { try await Task.sleep(for: .milliseconds(50)) }
                        try await outbound.close(.normalClosure, reason: nil)
                    }
                    _ = try await group.next()
                    group.cancelAll()
                }
            }
            inbox.finish()
        }
    }

    func close() async {
        stop.withLockedValue { $0 = true }
        await task.value
    }
}
