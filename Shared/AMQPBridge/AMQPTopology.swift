/// Exchanges, queues and bindings, declared idempotently by every service at start-up.
public struct AMQPTopology: Sendable {
    public enum Argument: Sendable, Equatable {
        case string(String)
        case int(Int64)
    }

    public struct Exchange: Sendable {
        public var name: String
        public var type: String
        public init(name: String, type: String = "direct") {
            self.name = name
            self.type = type
        }
    }

    public struct Queue: Sendable {
        public var name: String
        public var arguments: [String: Argument]
        public init(name: String, arguments: [String: Argument] = [:]) {
            self.name = name
            self.arguments = arguments
        }
    }

    public struct Binding: Sendable {
        public var queue: String
        public var exchange: String
        public var routingKey: String
        public init(queue: String, exchange: String, routingKey: String) {
            self.queue = queue
            self.exchange = exchange
            self.routingKey = routingKey
        }
    }

    public var exchanges: [Exchange]
    public var queues: [Queue]
    public var bindings: [Binding]

    public init(exchanges: [Exchange] = [], queues: [Queue] = [], bindings: [Binding] = []) {
        self.exchanges = exchanges
        self.queues = queues
        self.bindings = bindings
    }
}

/// A message to publish: persistent, mandatory, with string headers.
public struct OutgoingMessage: Sendable {
    public var exchange: String
    public var routingKey: String
    public var body: [UInt8]
    public var messageID: String?
    public var headers: [String: AMQPTopology.Argument]
    /// Whether a message no queue takes counts as a failed publish (it does for jobs; a
    /// notification nobody is listening for is simply dropped).
    public var mandatory: Bool

    public init(
        exchange: String, routingKey: String, body: [UInt8], messageID: String? = nil,
        headers: [String: AMQPTopology.Argument] = [:], mandatory: Bool = true
    ) {
        self.exchange = exchange
        self.routingKey = routingKey
        self.body = body
        self.messageID = messageID
        self.headers = headers
        self.mandatory = mandatory
    }
}

/// A message handed to a consumer; settle it with the consumer's `ack`/`reject`.
public struct AMQPDelivery: Sendable {
    public var body: [UInt8]
    public var messageID: String?
    public var headers: [String: AMQPTopology.Argument]
    public var redelivered: Bool
    public var exchange: String
    public var routingKey: String
    let deliveryTag: UInt64
    let generation: Int

    public func header(_ name: String) -> String? {
        switch headers[name] {
        case .string(let value)?: return value
        case .int(let value)?: return String(value)
        case nil: return nil
        }
    }
}

/// What a sweep of a queue did.
public struct SweepResult: Sendable, Equatable {
    public var examined: Int
    public var removed: Int

    public init(examined: Int, removed: Int) {
        self.examined = examined
        self.removed = removed
    }
}

/// Depth and consumers of a queue, as the broker reports them.
public struct QueueStats: Sendable, Equatable {
    public var name: String
    public var messages: Int
    public var consumers: Int
}
