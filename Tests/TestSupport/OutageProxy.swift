import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A TCP proxy on 127.0.0.1 in front of a server (PostgreSQL, RabbitMQ) that a test can take
/// away and bring back: the outage its services see, without stopping the machine's server,
/// which other tests and suites may be using meanwhile.
///
/// `cut()` ends every connection through the proxy and stops listening, so a connection
/// attempt is refused as it would be by a stopped server; `restore()` listens again on the
/// same port. Each connection is two threads copying bytes, one per direction.
public final class OutageProxy: @unchecked Sendable {
    // @unchecked: the mutable state is guarded by `lock`.
    public let port: Int
    private let targetPort: Int
    private let lock = NSLock()
    private var listener: Int32 = -1
    private var connections: [Int: (client: Int32, server: Int32)] = [:]
    private var nextConnection = 0

    /// A proxy for the server `url` names (`scheme://user:password@127.0.0.1:port/…`).
    public convenience init(for url: String) throws {
        guard let port = URLComponents(string: url)?.port else { throw Failure(description: "no port in \(url)") }
        try self.init(targetPort: port)
    }

    public init(targetPort: Int) throws {
        self.targetPort = targetPort
        guard let (fd, port) = Loopback.bind(reusingAddress: true), listen(fd, 64) == 0 else {
            throw Failure(description: "the proxy cannot listen")
        }
        self.port = port
        listener = fd
        startAccepting(fd)
    }

    /// `url` with its port replaced by the proxy's.
    public func routing(_ url: String) -> String {
        guard var components = URLComponents(string: url) else { return url }
        components.port = port
        return components.string ?? url
    }

    /// Every open connection ends and new ones are refused, until `restore()`.
    public func cut() {
        let (closing, open) = lock.withLock { () -> (Int32, [(client: Int32, server: Int32)]) in
            defer { listener = -1 }
            return (listener, Array(connections.values))
        }
        if closing >= 0 {
            shutdown(closing, Int32(SHUT_RDWR))
            Glibc.close(closing)
        }
        // The copying threads see the end, and the last of each pair closes both sockets.
        for pair in open {
            shutdown(pair.client, Int32(SHUT_RDWR))
            shutdown(pair.server, Int32(SHUT_RDWR))
        }
    }

    /// Connections are accepted again, on the same port.
    public func restore() throws {
        guard lock.withLock({ listener < 0 }) else { return }
        guard let (fd, _) = Loopback.bind(port: port, reusingAddress: true), listen(fd, 64) == 0 else {
            throw Failure(description: "the proxy cannot listen on :\(port) again")
        }
        lock.withLock { listener = fd }
        startAccepting(fd)
    }

    /// Cuts, for good.
    public func close() { cut() }

    private func startAccepting(_ fd: Int32) {
        Thread { [self] in
            while true {
                let client = Loopback.accept(fd)
                guard client >= 0 else { return }
                guard let server = Loopback.connect(port: targetPort) else {
                    Glibc.close(client)
                    continue
                }
                let id: Int? = lock.withLock {
                    guard listener == fd else { return nil }
                    nextConnection += 1
                    connections[nextConnection] = (client, server)
                    return nextConnection
                }
                guard let id else {
                    Glibc.close(client)
                    Glibc.close(server)
                    return
                }
                let remaining = Remaining()
                Thread { [self] in copy(from: client, to: server, id: id, remaining: remaining) }.start()
                Thread { [self] in copy(from: server, to: client, id: id, remaining: remaining) }.start()
            }
        }.start()
    }

    /// How many of a connection's two copying threads still run.
    private final class Remaining: @unchecked Sendable {
        // @unchecked: only touched under the proxy's `lock`.
        var count = 2
    }

    private func copy(from source: Int32, to destination: Int32, id: Int, remaining: Remaining) {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        loop: while true {
            let count = buffer.withUnsafeMutableBytes { recv(source, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { break }
            var sent = 0
            while sent < count {
                let n = buffer.withUnsafeBytes { send(destination, $0.baseAddress! + sent, count - sent, Int32(MSG_NOSIGNAL)) }
                guard n > 0 else { break loop }
                sent += n
            }
        }
        // One direction ended: so does the other, and the last thread out closes both.
        shutdown(source, Int32(SHUT_RDWR))
        shutdown(destination, Int32(SHUT_RDWR))
        let last = lock.withLock { () -> Bool in
            remaining.count -= 1
            guard remaining.count == 0 else { return false }
            connections[id] = nil
            return true
        }
        if last {
            Glibc.close(source)
            Glibc.close(destination)
        }
    }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }
}
