import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A minimal blocking HTTP/1.1 keep-alive client for the load generator: one socket per
/// lane, on its own thread, so that the client costs far less CPU than the server it
/// measures (URLSession over libcurl cost more than the gateway itself).
final class RawHTTPConnection {
    private var fd: Int32 = -1
    private let host: String
    private let port: UInt16
    private var buffer: [UInt8] = []

    init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    deinit { if fd >= 0 { close(fd) } }

    private func connectIfNeeded() throws {
        guard fd < 0 else { return }
        var hints = addrinfo()
        hints.ai_family = AF_INET
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &result) == 0, let info = result else {
            throw POSIXError(.EHOSTUNREACH)
        }
        defer { freeaddrinfo(result) }
        let socketFD = socket(info.pointee.ai_family, info.pointee.ai_socktype, info.pointee.ai_protocol)
        guard socketFD >= 0, connect(socketFD, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 else {
            if socketFD >= 0 { close(socketFD) }
            throw POSIXError(.ECONNREFUSED)
        }
        var one: Int32 = 1
        setsockopt(socketFD, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        fd = socketFD
        buffer = []
    }

    /// Sends one request (with a bearer token when given) and returns the status and body.
    func send(method: String, path: String, token: String?, body: [UInt8] = []) throws -> (Int, [UInt8]) {
        do {
            return try attempt(method: method, path: path, token: token, body: body)
        } catch {
            // A keep-alive connection the server closed: reconnect once.
            if fd >= 0 { close(fd); fd = -1 }
            return try attempt(method: method, path: path, token: token, body: body)
        }
    }

    private func attempt(method: String, path: String, token: String?, body: [UInt8]) throws -> (Int, [UInt8]) {
        try connectIfNeeded()
        let authorization = token.map { "Authorization: Bearer \($0)\r\n" } ?? ""
        var request = Array("\(method) \(path) HTTP/1.1\r\nHost: \(host)\r\n\(authorization)Content-Type: application/json\r\nContent-Length: \(body.count)\r\n\r\n".utf8)
        request.append(contentsOf: body)
        var sent = 0
        while sent < request.count {
            let written = request[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard written > 0 else { throw POSIXError(.EPIPE) }
            sent += written
        }
        // Headers.
        var headerEnd: Int?
        while headerEnd == nil {
            headerEnd = findHeaderEnd()
            if headerEnd == nil { try fill() }
        }
        let head = String(decoding: buffer[..<headerEnd!], as: UTF8.self)
        let lines = head.split(separator: "\r\n")
        guard let statusLine = lines.first, statusLine.split(separator: " ").count >= 2,
              let status = Int(statusLine.split(separator: " ")[1]) else { throw POSIXError(.EBADMSG) }
        var length = 0
        for line in lines.dropFirst() where line.lowercased().hasPrefix("content-length:") {
            length = Int(line.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) ?? 0
        }
        let bodyStart = headerEnd! + 4
        while buffer.count < bodyStart + length { try fill() }
        let responseBody = Array(buffer[bodyStart..<(bodyStart + length)])
        buffer.removeFirst(bodyStart + length)
        return (status, responseBody)
    }

    private func findHeaderEnd() -> Int? {
        guard buffer.count >= 4 else { return nil }
        for index in 0...(buffer.count - 4)
        where buffer[index] == 13 && buffer[index + 1] == 10 && buffer[index + 2] == 13 && buffer[index + 3] == 10 {
            return index
        }
        return nil
    }

    private func fill() throws {
        var chunk = [UInt8](repeating: 0, count: 65536)
        let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { throw POSIXError(.ECONNRESET) }
        buffer.append(contentsOf: chunk[..<count])
    }
}

/// Runs `body` on a dedicated thread and awaits its result.
func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread {
            continuation.resume(with: Result { try body() })
        }
        thread.stackSize = 1 << 20
        thread.start()
    }
}
