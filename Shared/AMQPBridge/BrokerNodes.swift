import Logging
import Metrics

/// Which of an endpoint's nodes a publisher or consumer connects to: a random one at first,
/// so that the connections of many processes spread over a cluster; the one it had while
/// that works; the next one once its connection broke. A move to another node is a
/// failover: logged, and counted in `syncline_amqp_failovers_total{role}`; the node in use
/// is the one `syncline_amqp_connected{role,node}` shows at 1.
struct BrokerNodes {
    let endpoint: AMQPEndpoint
    let role: String
    /// Where the next connection attempt starts.
    private var next: Int
    private var connected: Int?

    init(_ endpoint: AMQPEndpoint, role: String) {
        self.endpoint = endpoint
        self.role = role
        next = Int.random(in: 0..<endpoint.nodes.count)
    }

    /// A connection to the first node that answers, trying them in turn from `next`, set up
    /// by `setUp` (declaring the topology, opening a consumer). A node where setting up
    /// fails is passed over by the next attempt.
    mutating func connect(
        heartbeatSeconds: Int, logger: Logger, setUp: (AMQPConnection) throws(AMQPError) -> Void
    ) throws(AMQPError) -> AMQPConnection {
        var failures: [String] = []
        for step in 0..<endpoint.nodes.count {
            let node = (next + step) % endpoint.nodes.count
            let connection: AMQPConnection
            do {
                connection = try AMQPConnection(node: endpoint.nodes[node], heartbeatSeconds: heartbeatSeconds)
            } catch {
                failures.append(error.message)
                continue
            }
            do {
                try setUp(connection)
            } catch {
                connection.abandon()
                next = (node + 1) % endpoint.nodes.count
                throw error
            }
            connected(to: node, logger: logger)
            return connection
        }
        throw AMQPError(.connection, failures.joined(separator: "; "))
    }

    private mutating func connected(to node: Int, logger: Logger) {
        let previous = connected
        connected = node
        next = node
        Gauge(label: "syncline_amqp_connected", dimensions: [("role", role), ("node", "\(endpoint.nodes[node])")]).record(1)
        guard let previous, previous != node else {
            logger.info("connected to RabbitMQ", metadata: ["amqp.role": "\(role)", "amqp.node": "\(endpoint.nodes[node])"])
            return
        }
        Gauge(label: "syncline_amqp_connected", dimensions: [("role", role), ("node", "\(endpoint.nodes[previous])")]).record(0)
        Counter(label: "syncline_amqp_failovers_total", dimensions: [("role", role)]).increment()
        logger.warning("moved to another RabbitMQ node", metadata: [
            "amqp.role": "\(role)", "amqp.node": "\(endpoint.nodes[node])", "amqp.previous_node": "\(endpoint.nodes[previous])",
        ])
    }

    /// The connection broke: the next attempt starts at the following node.
    mutating func lost() {
        next = ((connected ?? next) + 1) % endpoint.nodes.count
    }

}
