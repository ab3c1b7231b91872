import AMQPBridge
import BrokerTopology
import HTTPSupport
import Hummingbird
import Logging
import NIOCore
import PQBridge
import Persistence
import ServiceLifecycle
import ServiceSupport

/// Wires the worker: consumers on `sync.jobs` and `sync.jobs.exhausted`, a pool sized for
/// its transactions (and the exhausted consumer's four), a publisher for retries, dead
/// letters and job events, and the operations endpoints.
/// `observability`: services that must stop last (the span exporter). `onServerRunning`:
/// told the listening channel (a test that asked for port 0 reads its port there).
func buildWorker(
    configuration: Configuration, settings: WorkerSettings, observability: [any Service] = [], logger: Logger,
    onServerRunning: @escaping @Sendable (any Channel) async -> Void = { _ in }
) throws -> some ApplicationProtocol {
    let endpoint = try configuration.amqpEndpoint()
    let pool = configuration.primaryPool(size: min(configuration.databasePoolSize, settings.concurrency + 4), logger: logger)
    let topology = SynclineTopology.topology(retryDelays: configuration.retryDelays)
    let publisher = AMQPPublisher(
        endpoint: endpoint, topology: topology, slowThreshold: configuration.slowThreshold, logger: logger)
    let jobs = AMQPConsumer(
        configuration: .init(
            endpoint: endpoint, topology: topology, queue: SynclineTopology.jobsQueue,
            prefetch: UInt16(settings.prefetch)),
        logger: logger)
    let exhausted = AMQPConsumer(
        configuration: .init(endpoint: endpoint, topology: topology, queue: SynclineTopology.exhaustedQueue, prefetch: 4),
        logger: logger)

    let announcer = EventAnnouncer(publisher: publisher, logger: logger)
    let hookClient = HookCaller.makeClient()
    let rulesStore = RulesStore(pool: pool)
    // Not polled: every apply transaction reads the current version and hands a newer one to the cache.
    let rules = RulesCache(
        interval: configuration.rulesRefresh, logger: logger, version: rulesStore.currentVersion, load: rulesStore.current)

    let router = Router(context: BasicRequestContext.self, options: .autoGenerateHeadEndpoints)
    OperationsEndpoints.register(on: router) {
        async let database = pool.ping()
        return ["database": await database, "broker": jobs.isConnected]
    }
    return Application(
        router: router,
        configuration: .init(address: .hostname("0.0.0.0", port: configuration.port), serverName: "syncline-worker"),
        services: observability + [
            pool,
            ResourceCloser { await publisher.shutdown() },
            ResourceCloser { try? await hookClient.shutdown() },
            // Stopped in reverse order: the consumer first, then the announcer publishes
            // the last events, then the publisher and pool close.
            announcer,
            StatisticsWarmup(statistics: FirstStatistics(pool: pool), logger: logger),
            JobConsumer(
                jobs: jobs, exhausted: exhausted, database: pool, store: ApplyStore(pool: pool), rules: rules,
                hooks: HookCaller(client: hookClient, allowPrivate: configuration.allowPrivateWebhooks, logger: logger), deadLetters: DeadLetterStore(pool: pool),
                accounts: AccountStore(pool: pool), publisher: publisher, announcer: announcer, configuration: configuration, settings: settings,
                logger: logger),
        ],
        onServerRunning: onServerRunning,
        logger: logger)
}
