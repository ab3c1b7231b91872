import Foundation
import NIOPosix
import SyncModels
#if canImport(Glibc)
import Glibc
#endif

/// Where webhooks may go: never to private, loopback or link-local addresses unless
/// `ALLOW_PRIVATE_WEBHOOKS=true` (a device's push_url must not reach into our network).
public enum WebhookAddresses {
    /// Why `text` cannot be where webhooks (or a record feed) go, for the person who gave
    /// it; nil when it can: an http(s) URL of at most 2,048 characters whose host is no
    /// private literal (unless `allowPrivate`). Names are resolved again at each delivery.
    public static func problem(with text: String, allowPrivate: Bool) -> String? {
        guard text.unicodeScalars.count <= 2048, Names.isPlainText(text),
              let url = URL(string: text), url.scheme == "https" || url.scheme == "http", let host = url.host, !host.isEmpty
        else { return "must be an http(s) URL" }
        if !allowPrivate, isPrivateLiteral(host: host) { return "must not point to a private or loopback address" }
        return nil
    }

    /// Literal addresses and `localhost`, checked at registration without a DNS lookup.
    public static func isPrivateLiteral(host: String) -> Bool {
        let host = host.trimmingCharacters(in: CharacterSet(charactersIn: "[]")).lowercased()
        if host == "localhost" || host.hasSuffix(".localhost") { return true }
        return address(host).map(isPrivate) ?? false
    }

    /// Resolves the host and answers true if any address it resolves to is private (or
    /// it does not resolve). Blocking: call off the event loops.
    public static func resolvesToPrivate(host: String) -> Bool {
        if isPrivateLiteral(host: host) { return true }
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, nil, &hints, &result) == 0, let first = result else { return true }
        defer { freeaddrinfo(first) }
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let info = cursor {
            if let sockaddr = info.pointee.ai_addr, isPrivate(bytes(sockaddr, family: info.pointee.ai_family)) { return true }
            cursor = info.pointee.ai_next
        }
        return false
    }

    /// `resolvesToPrivate` on NIO's shared thread pool, never on an event loop or the
    /// cooperative pool (and not on a new thread per check). A pool that is shutting down
    /// answers "private", which refuses the request.
    public static func resolvesToPrivateOffThePool(host: String) async -> Bool {
        (try? await NIOThreadPool.singleton.runIfActive { resolvesToPrivate(host: host) }) ?? true
    }

    static func address(_ text: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 { return withUnsafeBytes(of: v4) { Array($0) } }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 { return withUnsafeBytes(of: v6) { Array($0) } }
        return nil
    }

    static func bytes(_ address: UnsafeMutablePointer<sockaddr>, family: Int32) -> [UInt8] {
        if family == AF_INET {
            return address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { withUnsafeBytes(of: $0.pointee.sin_addr) { Array($0) } }
        }
        return address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { withUnsafeBytes(of: $0.pointee.sin6_addr) { Array($0) } }
    }

    static func isPrivate(_ b: [UInt8]) -> Bool {
        if b.count == 4 {
            return b[0] == 10 || b[0] == 127 || b[0] == 0 || (b[0] == 172 && (16...31).contains(b[1]))
                || (b[0] == 192 && b[1] == 168) || (b[0] == 169 && b[1] == 254) || (b[0] == 100 && (64...127).contains(b[1]))
                || b[0] >= 224
        }
        guard b.count == 16 else { return true }
        if b[0..<15].allSatisfy({ $0 == 0 }) { return true }  // :: and ::1
        if b[0..<10].allSatisfy({ $0 == 0 }) && b[10] == 0xff && b[11] == 0xff { return isPrivate(Array(b[12...])) }  // ::ffff:v4
        return (b[0] & 0xfe) == 0xfc || (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) || b[0] == 0xff
    }
}
