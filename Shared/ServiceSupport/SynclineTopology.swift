import AMQPBridge

/// Broker names and the topology every service declares at start-up (SPEC §9).
public enum SynclineTopology {
    public static let jobsExchange = "sync.jobs"
    public static let jobsQueue = "sync.jobs"
    public static let jobsRoutingKey = "sync.jobs"
    public static let deadLetterExchange = "sync.dlx"
    public static let deadLetterQueue = "sync.jobs.dlq"
    public static let deadLetterRoutingKey = "sync.jobs.dlq"
    /// The broker's own backstop against a message redelivered forever; well above
    /// MAX_ATTEMPTS so it only ever catches what the worker could not.
    public static let deliveryLimit: Int64 = 50

    public static var topology: AMQPTopology {
        AMQPTopology(
            exchanges: [.init(name: jobsExchange), .init(name: deadLetterExchange)],
            queues: [
                .init(name: jobsQueue, arguments: [
                    "x-queue-type": .string("quorum"),
                    "x-delivery-limit": .int(deliveryLimit),
                    "x-dead-letter-exchange": .string(deadLetterExchange),
                    "x-dead-letter-routing-key": .string(deadLetterRoutingKey),
                    "x-dead-letter-strategy": .string("at-least-once"),
                    "x-overflow": .string("reject-publish"),
                ]),
                .init(name: deadLetterQueue, arguments: ["x-queue-type": .string("quorum")]),
            ],
            bindings: [
                .init(queue: jobsQueue, exchange: jobsExchange, routingKey: jobsRoutingKey),
                .init(queue: deadLetterQueue, exchange: deadLetterExchange, routingKey: deadLetterRoutingKey),
            ])
    }

    /// The message that announces a committed job: its id, nothing the worker trusts.
    public static func jobMessage(jobID: String, traceID: String?) -> OutgoingMessage {
        var headers: [String: AMQPTopology.Argument] = [:]
        if let traceID { headers["traceparent"] = .string(traceID) }
        return OutgoingMessage(
            exchange: jobsExchange, routingKey: jobsRoutingKey,
            body: Array(#"{"job_id":"\#(jobID)"}"#.utf8), messageID: jobID, headers: headers)
    }
}
