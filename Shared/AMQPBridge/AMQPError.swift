import Foundation
import SyncModels

/// A failure talking to the broker. Connection-level failures mean the connection is
/// gone and must be reopened; all of them are worth retrying later.
public struct AMQPError: Error, CustomStringConvertible, Sendable {
    public enum Code: Sendable, Equatable {
        case connection
        /// The broker closed the channel or connection with this reply code.
        case closedByServer(UInt16)
        /// A publish was nacked or returned as unroutable.
        case notConfirmed
        case timeout
    }

    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "AMQP \(code): \(message)" }
}

/// Where the broker is: one `amqp://user:pass@host:port/vhost`, or the nodes of a cluster
/// as several such URLs separated by commas. A connection goes to one live node and moves
/// to the next when its node dies.
public struct AMQPEndpoint: Sendable, Equatable {
    public struct Node: Sendable, Equatable, CustomStringConvertible {
        public var host: String
        public var port: Int
        public var user: String
        public var password: String
        public var vhost: String

        public init?(url: String) {
            guard url.hasPrefix("amqp://") else { return nil }
            var rest = String(url.dropFirst("amqp://".count))
            var vhost = "/"
            if let slash = rest.firstIndex(of: "/") {
                let path = String(rest[rest.index(after: slash)...])
                if !path.isEmpty { vhost = path.removingPercentEncoding ?? path }
                rest = String(rest[..<slash])
            }
            var user = "guest", password = "guest"
            if let at = rest.lastIndex(of: "@") {
                let credentials = rest[..<at]
                rest = String(rest[rest.index(after: at)...])
                let pieces = credentials.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
                user = String(pieces[0]).removingPercentEncoding ?? String(pieces[0])
                if pieces.count > 1 { password = String(pieces[1]).removingPercentEncoding ?? String(pieces[1]) }
            }
            var host = rest, port = 5672
            if let colon = rest.lastIndex(of: ":"), let parsed = Int(rest[rest.index(after: colon)...]) {
                host = String(rest[..<colon])
                port = parsed
            }
            guard !host.isEmpty else { return nil }
            self.host = host
            self.port = port
            self.user = user
            self.password = password
            self.vhost = vhost
        }

        /// `host:port`, for logs and metrics (never the credentials).
        public var description: String { "\(host):\(port)" }
    }

    /// At least one; every node serves the same virtual host.
    public let nodes: [Node]

    public init?(url: String) {
        var nodes: [Node] = []
        for part in url.split(separator: ",") {
            guard let node = Node(url: part.trimmingCharacters(in: .whitespaces)) else { return nil }
            nodes.append(node)
        }
        guard let first = nodes.first, nodes.allSatisfy({ $0.vhost == first.vhost }) else { return nil }
        self.nodes = nodes
    }

    /// The first node's virtual host: every node's.
    public var vhost: String { nodes[0].vhost }
}

extension String {
    fileprivate var removingPercentEncoding: String? {
        PercentEncoding.decoded(self).map { String(decoding: $0, as: UTF8.self) }
    }
}
