import AMQPBridge
import Auth
import BrokerTopology
import Foundation
import HTTPSupport
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import PQBridge
import Persistence
import ServiceLifecycle
import ServiceSupport

/// Wires fanout: this replica's event queue and hub, the stream routes (SSE and
/// WebSocket on one path), the webhook dispatcher, and the operations endpoints — as one
/// service group. The hub comes last so that on shutdown it is stopped first: it ends every
/// open stream, and then the HTTP server, which waits for open responses, can finish.
/// `observability`: services that must stop last (the span exporter). `handlingSignals`:
/// SIGTERM and SIGINT shut the group down (as a process; inside another group it follows
/// that group instead).
/// `onServerRunning`: told the listening channel (a test that asked for port 0 reads its
/// port there).
func buildFanout(
    configuration: Configuration, settings: FanoutSettings, observability: [any Service] = [], handlingSignals: Bool,
    logger: Logger, onServerRunning: @escaping @Sendable (any Channel) async -> Void = { _ in }
) async throws -> ServiceGroup {
    let verifier = try await configuration.tokenVerifier(logger: logger)
    let endpoint = try configuration.amqpEndpoint()
    let pool = configuration.primaryPool(logger: logger)
    // This replica's own queue: not exclusive (it survives a reconnect), and gone two
    // minutes after the replica is.
    let queue = "fanout.\(UUID().uuidString.prefix(12).lowercased())"
    var topology = SynclineTopology.topology(retryDelays: configuration.retryDelays)
    topology.queues.append(.init(name: queue, arguments: ["x-expires": .int(120_000)]))
    let publisher = AMQPPublisher(
        endpoint: endpoint, topology: topology, confirmTimeout: 2, slowThreshold: configuration.slowThreshold, logger: logger)
    let consumer = AMQPConsumer(
        configuration: .init(endpoint: endpoint, topology: topology, queue: queue, prefetch: 256), logger: logger)
    let background = BackgroundWork()
    let hub = Hub(
        queue: queue, publisher: publisher, consumer: consumer, registry: FanoutQueueStore(pool: pool),
        devices: DeviceStore(pool: pool), heartbeat: settings.streamHeartbeat,
        streamsPerUser: settings.streamsPerUser, background: background, logger: logger)
    let webhooks = WebhookDispatcher(
        events: AMQPConsumer(
            configuration: .init(endpoint: endpoint, topology: topology, queue: SynclineTopology.notifyEventsQueue, prefetch: 32),
            logger: logger),
        deliveries: AMQPConsumer(
            configuration: .init(endpoint: endpoint, topology: topology, queue: SynclineTopology.notifyDeliveriesQueue, prefetch: 64),
            logger: logger),
        devices: DeviceStore(pool: pool), deadLetters: DeadLetterStore(pool: pool), publisher: publisher,
        configuration: configuration, limits: settings.webhooks, logger: logger)
    let feeds = FeedDelivery(
        feeds: FeedStore(pool: pool), configuration: configuration, settings: settings.feeds, timeout: settings.webhooks.timeout,
        logger: logger)
    let routes = StreamRoutes(
        auth: Authenticator(verifier: verifier, allowQueryToken: true), devices: DeviceStore(pool: pool),
        pulls: PullStore(pool: pool), spaces: SpaceStore(pool: pool), hub: hub, limiter: RateLimiter(settings.streamRateLimit))

    let cors = HTTPSupport.CORSMiddleware<BasicRequestContext>(allowedOrigins: settings.http.corsAllowedOrigins, methods: [.get])
    let router = fanoutRouter(routes, pool: pool, consumer: consumer, cors: cors, configuration: configuration, logger: logger)
    let idleTimeout = TimeAmount.milliseconds(Int64(settings.http.idleTimeout * 1000))
    let connections = ConnectionCounter(limits: settings.http.connectionLimits)
    let streams = ServerSentEventsHandler.Setup(routes: routes, cors: cors, slow: configuration.slowThreshold)
    let app = Application(
        router: router,
        server: HTTPServerBuilder { responder in
            StreamServerChannel(responder: responder, idleTimeout: idleTimeout, streams: streams, connections: connections) { request, channel, logger in
                await routes.webSocketDecision(request, channel: channel, logger: logger, slow: configuration.slowThreshold)
            }
        },
        configuration: .init(address: .hostname("0.0.0.0", port: configuration.port), serverName: "syncline-fanout"),
        onServerRunning: onServerRunning,
        logger: logger)
    let closer = ResourceCloser { await publisher.shutdown() }
    return ServiceGroup(configuration: .init(
        services: observability + [pool, closer, background, app, webhooks, feeds, hub], gracefulShutdownSignals: handlingSignals ? [.sigterm, .sigint] : [], logger: logger))
}

/// The HTTP routes: the stream (a WebSocket upgrade is decided before the router) and the
/// operations endpoints.
func fanoutRouter(
    _ routes: StreamRoutes, pool: PGPool, consumer: AMQPConsumer, cors: HTTPSupport.CORSMiddleware<BasicRequestContext>,
    configuration: Configuration, logger: Logger
) -> Router<BasicRequestContext> {
    let router = Router(context: BasicRequestContext.self, options: .autoGenerateHeadEndpoints)
    let methods = RouteMethods()
    router.addMiddleware {
        RequestTelemetryMiddleware(logger: logger, slow: configuration.slowThreshold)
        cors
        ProblemMiddleware(routes: methods)
    }
    routes.registerHTTP(on: router)
    OperationsEndpoints.register(on: router) {
        async let database = pool.ping()
        return ["database": await database, "broker": consumer.isConnected]
    }
    methods.load(from: router)
    return router
}
