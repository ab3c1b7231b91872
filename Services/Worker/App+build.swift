import AMQPBridge
import Hummingbird
import Logging
import PQBridge
import Persistence
import ServiceSupport

/// Wires the worker: one consumer on `sync.jobs`, a pool sized for its prefetch, a
/// publisher for dead letters, and the operations endpoints.
func buildWorker(configuration: Configuration, logger: Logger) throws -> some ApplicationProtocol {
    let endpoint = try configuration.amqpEndpoint()
    let pool = PGPool(
        url: configuration.databaseURL, size: min(configuration.databasePoolSize, configuration.workerPrefetch),
        logger: logger)
    let publisher = AMQPPublisher(endpoint: endpoint, topology: SynclineTopology.topology, logger: logger)
    let consumer = AMQPConsumer(
        configuration: .init(
            endpoint: endpoint, topology: SynclineTopology.topology, queue: SynclineTopology.jobsQueue,
            prefetch: UInt16(configuration.workerPrefetch)),
        logger: logger)

    let router = Router(context: BasicRequestContext.self)
    OperationsEndpoints.register(on: router) {
        async let database = (try? await pool.query("SELECT 1")) != nil
        return ["database": await database, "broker": consumer.isConnected]
    }
    return Application(
        router: router,
        configuration: .init(address: .hostname("0.0.0.0", port: configuration.port), serverName: "syncline-worker"),
        services: [
            ResourceCloser {
                await publisher.shutdown()
                await pool.shutdown()
            },
            JobConsumer(
                consumer: consumer, store: ApplyStore(pool: pool), publisher: publisher,
                configuration: configuration, logger: logger),
        ],
        logger: logger)
}
