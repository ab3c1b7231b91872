import Foundation
import NIOConcurrencyHelpers
import TestSupport

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
        try await eventually(within: seconds, "a \(type) message") {
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
        guard let socketFD = Loopback.connect(port: port) else { throw StackError(description: "cannot connect to :\(port)") }
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

/// A WebSocket client on a plain socket (RFC 6455, as much as the fanout speaks):
/// upgrades, then reads frames on its own thread, collecting text messages and answering
/// pings, until the server closes or `close()` is called.
final class WSClient: @unchecked Sendable {
    // @unchecked: `fd` is set once; frames are sent under `sending`.
    let inbox = Inbox()
    private let fd: Int32
    private let sending = NIOLockedValueBox(false)

    init(port: Int, path: String) {
        fd = Loopback.connect(port: port) ?? -1
        let fd = self.fd, inbox = self.inbox
        guard fd >= 0 else { inbox.finish(); return }
        let key = Data((0..<16).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
        let request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + "Sec-WebSocket-Key: \(key)\r\nSec-WebSocket-Version: 13\r\n\r\n"
        _ = request.withCString { send(fd, $0, strlen($0), 0) }
        let thread = Thread { [self] in
            var pending: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 8192)
            var upgraded = false
            reading: while true {
                let n = recv(fd, &buffer, buffer.count, 0)
                if n <= 0 { break }
                pending += buffer[..<n]
                if !upgraded {
                    guard let end = pending.firstRange(of: Array("\r\n\r\n".utf8)) else { continue }
                    guard String(decoding: pending[..<end.lowerBound], as: UTF8.self).hasPrefix("HTTP/1.1 101") else { break }
                    pending.removeSubrange(..<end.upperBound)
                    upgraded = true
                }
                while let (opcode, payload, length) = Self.frame(in: pending) {
                    pending.removeFirst(length)
                    switch opcode {
                    case 0x1: inbox.add(String(decoding: payload, as: UTF8.self))
                    case 0x8: break reading
                    case 0x9: sendFrame(opcode: 0xA, payload: payload)
                    default: break
                    }
                }
            }
            inbox.finish()
        }
        thread.start()
    }

    /// The first whole frame of `bytes` (server frames are not masked): its opcode, its
    /// payload and how many bytes it took.
    static func frame(in bytes: [UInt8]) -> (opcode: UInt8, payload: [UInt8], length: Int)? {
        guard bytes.count >= 2 else { return nil }
        var length = Int(bytes[1] & 0x7F), header = 2
        if length == 126 {
            guard bytes.count >= 4 else { return nil }
            length = Int(bytes[2]) << 8 | Int(bytes[3])
            header = 4
        } else if length == 127 {
            guard bytes.count >= 10 else { return nil }
            length = bytes[2..<10].reduce(0) { $0 << 8 | Int($1) }
            header = 10
        }
        guard bytes.count >= header + length else { return nil }
        return (bytes[0] & 0x0F, Array(bytes[header..<header + length]), header + length)
    }

    /// A final frame, masked as a client's must be (payloads under 126 bytes).
    private func sendFrame(opcode: UInt8, payload: [UInt8]) {
        let mask = (0..<4).map { _ in UInt8.random(in: 0...255) }
        let frame = [0x80 | opcode, 0x80 | UInt8(payload.count)] + mask
            + payload.enumerated().map { $0.element ^ mask[$0.offset % 4] }
        sending.withLockedValue { _ in _ = frame.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } }
    }

    func close() async {
        guard fd >= 0 else { return }
        sendFrame(opcode: 0x8, payload: [0x03, 0xE8])  // 1000: normal closure
        try? await eventually(within: 2, "the server's close") { inbox.finished ? true : nil }
        shutdown(fd, Int32(SHUT_RDWR))
        Glibc.close(fd)
    }
}
