import AMQPBridge
import SyncModels

/// The topology as RabbitMQ definitions (the JSON the management plugin imports), so an
/// operator can review or pre-provision exactly what the services declare at start-up.
/// `deploy/kubernetes/rabbitmq-definitions.json` is this, for the default retry delays; a
/// unit test keeps the two equal.
public enum BrokerDefinitions {
    public static func json(retryDelays: [Double], vhost: String = "/") -> JSONValue {
        let topology = SynclineTopology.topology(retryDelays: retryDelays)
        func arguments(_ arguments: [String: AMQPTopology.Argument]) -> JSONValue {
            .object(arguments.mapValues {
                switch $0 {
                case .string(let text): return .string(text)
                case .int(let number): return .int(number)
                }
            })
        }
        return .object([
            "exchanges": .array(topology.exchanges.map {
                .object([
                    "name": .string($0.name), "vhost": .string(vhost), "type": .string($0.type), "durable": .bool(true),
                    "auto_delete": .bool(false), "internal": .bool(false), "arguments": .object([:]),
                ])
            }),
            "queues": .array(topology.queues.sorted { $0.name < $1.name }.map {
                .object([
                    "name": .string($0.name), "vhost": .string(vhost), "durable": .bool(true), "auto_delete": .bool(false),
                    "arguments": arguments($0.arguments),
                ])
            }),
            "bindings": .array(topology.bindings.map {
                .object([
                    "source": .string($0.exchange), "vhost": .string(vhost), "destination": .string($0.queue),
                    "destination_type": .string("queue"), "routing_key": .string($0.routingKey), "arguments": .object([:]),
                ])
            }),
        ])
    }
}
