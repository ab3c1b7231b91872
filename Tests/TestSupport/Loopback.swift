import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// TCP sockets on 127.0.0.1, for the servers and clients the tests make themselves.
public enum Loopback {
    /// A TCP socket bound to 127.0.0.1 on `port` (0: one the kernel picks), and that port;
    /// the caller listens on it or closes it. Close-on-exec: a service process spawned by
    /// another test task meanwhile must not inherit it (it would hold the port that a
    /// service started next is given, and that service could not bind it). With
    /// `reusingAddress`, a port whose last listener just closed can be bound again at once.
    public static func bind(port: Int = 0, reusingAddress: Bool = false) -> (fd: Int32, port: Int)? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        var one: Int32 = 1
        if reusingAddress { setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size)) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                Glibc.bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        guard bound else {
            close(fd)
            return nil
        }
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }

    /// The next connection on `listener` (-1 when it fails), close-on-exec like the listener.
    public static func accept(_ listener: Int32) -> Int32 {
        let connection = Glibc.accept(listener, nil, nil)
        if connection >= 0 { _ = fcntl(connection, F_SETFD, FD_CLOEXEC) }
        return connection
    }

    /// A TCP connection to 127.0.0.1:`port`, or nil; the caller closes it. With
    /// `receiveBuffer`, the kernel keeps at most about that much of what the server sends
    /// until it is read.
    public static func connect(port: Int, receiveBuffer: Int32? = nil) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        if var size = receiveBuffer { setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size)) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            return nil
        }
        return fd
    }

    /// Whether the socket listening on `port` (IPv4 or IPv6) belongs to process `pid` or to
    /// one of its descendants: a readiness probe that reached the port may have reached
    /// another process that took it first.
    public static func isListening(pid: pid_t, port: Int) -> Bool {
        let inodes = listeningInodes(port: port)
        guard !inodes.isEmpty else { return false }
        let processes = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        // Only the service and its descendants are looked into, not every process's files.
        return processes.compactMap { pid_t($0) }.filter { descends($0, from: pid) }.contains { owner in
            let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(owner)/fd")) ?? []
            return descriptors.contains { descriptor in
                guard let link = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(owner)/fd/\(descriptor)"),
                      link.hasPrefix("socket:[") else { return false }
                return inodes.contains(String(link.dropFirst(8).dropLast()))
            }
        }
    }

    /// The inodes of the sockets listening on `port`, from /proc/net/tcp and tcp6.
    static func listeningInodes(port: Int) -> Set<String> {
        let hexPort = String(format: ":%04X", port)
        var inodes = Set<String>()
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            guard let text = try? String(contentsOfFile: table, encoding: .utf8) else { continue }
            for line in text.split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ")
                // sl, local address, remote address, state (0A: listening), …, inode (10th)
                guard fields.count > 9, fields[1].hasSuffix(hexPort), fields[3] == "0A" else { continue }
                inodes.insert(String(fields[9]))
            }
        }
        return inodes
    }

    /// Whether `process` is `ancestor` or descends from it.
    static func descends(_ process: pid_t, from ancestor: pid_t) -> Bool {
        var current = process
        for _ in 0..<64 {
            if current == ancestor { return true }
            guard current > 1, let stat = try? String(contentsOfFile: "/proc/\(current)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { return false }
            // After "pid (name)": the state, then the parent's pid.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            guard fields.count > 1, let parent = pid_t(fields[1]) else { return false }
            current = parent
        }
        return false
    }
}
