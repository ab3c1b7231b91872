import AMQPBridge
import Auth
import BlobStorage
import BrokerTopology
import Foundation
import HTTPSupport
import Hummingbird
import Logging
import Operations
import PQBridge
import Persistence
import ServiceLifecycle
import ServiceSupport

/// Wires the gateway: stores over one pool, the publisher, the routes and the relay.
/// `observability`: services that must stop last (the span exporter).
func buildApplication(
    configuration: Configuration, settings: GatewaySettings, observability: [any Service] = [], logger: Logger
) async throws -> some ApplicationProtocol {
    let endpoint = try configuration.amqpEndpoint()
    let pool = configuration.primaryPool(logger: logger)
    var replicaLogger = logger
    replicaLogger[metadataKey: "database"] = "replica"
    let replica = settings.databaseReadURL.map {
        PGPool(
            url: $0, size: configuration.databasePoolSize, logger: replicaLogger, slowThreshold: configuration.slowThreshold,
            name: "replica", isSampled: Traces.isSampled)
    }
    let reads = ReadPools(primary: pool, replica: replica, logger: logger)
    let publisher = AMQPPublisher(
        endpoint: endpoint, topology: SynclineTopology.topology(retryDelays: configuration.retryDelays),
        confirmTimeout: 2, slowThreshold: configuration.slowThreshold, logger: logger)
    let auth = Authenticator(verifier: try await configuration.tokenVerifier(logger: logger))
    let devices = DeviceStore(pool: pool)
    let jobs = JobStore(pool: pool)
    let marks = PublishedMarks()
    let background = BackgroundWork()
    let pushLimiter = RateLimiter(settings.pushRateLimit)
    let views = ViewCounter(store: PublicStore(pool: pool), logger: logger)

    // A GET route answers HEAD too, with its header fields alone.
    let router = Router(context: GatewayRequestContext.self, options: .autoGenerateHeadEndpoints)
    let routes = RouteMethods()
    router.addMiddleware {
        RequestTelemetryMiddleware(logger: logger, slow: configuration.slowThreshold)
        CORSMiddleware(allowedOrigins: settings.http.corsAllowedOrigins, openPrefixes: ["/v1/public"])
        ProblemMiddleware(routes: routes)
        MetricsMiddleware()
    }
    if let filesOrigin = settings.publicFilesOrigin {
        router.add(middleware: PublicFilesOriginMiddleware(filesOrigin: filesOrigin))
    }
    DeviceRoutes(auth: auth, devices: devices, publisher: publisher, allowPrivateWebhooks: configuration.allowPrivateWebhooks).register(on: router)
    SyncRoutes(
        auth: auth, jobs: jobs, pulls: PullStore(reads: reads), spaces: SpaceStore(pool: pool),
        intake: IntakeBatcher(
            jobs: jobs, publisher: publisher, marks: marks, slots: settings.intakeConcurrency, background: background,
            logger: logger),
        maxClockSkewMilliseconds: Int64(settings.maxClockSkew * 1000),
        limiter: pushLimiter, publicIDLimiter: RateLimiter(settings.publicIDRateLimit)
    ).register(on: router)
    let publicLimiter = RateLimiter(settings.publicRateLimit)
    PublicRoutes(records: PublicStore(reads: reads), views: views, limiter: publicLimiter).register(on: router)
    let catalog = BlobCatalog(pool: pool)
    let blobStores = try BlobStores(settings.blobStore, pool: pool)
    let ingest = BlobIngest(catalog: catalog, stores: blobStores, maxBytes: settings.blobMaxBytes, spaceQuota: settings.spaceBlobQuota)
    let blobs = BlobRoutes(
        auth: auth, spaces: SpaceStore(pool: pool), catalog: catalog, stores: blobStores, ingest: ingest, limiter: pushLimiter,
        publicLimiter: publicLimiter, downloadsPerUser: ConcurrencyLimiter(limit: settings.downloadsPerUser),
        downloadsPerAddress: ConcurrencyLimiter(limit: settings.downloadsPerAddress),
        uploadsPerUser: ConcurrencyLimiter(limit: settings.uploadsPerUser),
        downloadPieces: DownloadPieces(budget: settings.downloadBuffer))
    blobs.register(on: router)
    UploadRoutes(
        auth: auth, catalog: catalog, ingest: ingest, blobs: blobs, limiter: pushLimiter, expiresIn: settings.uploadExpiry,
        openPerUser: settings.openUploadsPerUser
    ).register(on: router)
    let sweeper = BlobSweeper(catalog: catalog, stores: blobStores, logger: logger)
    SpaceRoutes(
        auth: auth, spaces: SpaceStore(pool: pool), publisher: publisher, sweeper: sweeper, background: background,
        maxOpenInvitations: settings.maxOpenInvitations
    ).register(on: router)
    let office = DeadLetterOffice(pool: pool, publisher: publisher, retryDelays: configuration.retryDelays, logger: logger)
    AccountRoutes(
        auth: auth, eraser: AccountEraser(pool: pool, publisher: publisher, office: office, sweeper: sweeper, logger: logger),
        inlineBudget: settings.accountDeletionInline, background: background
    ).register(on: router)
    AdminRoutes(
        auth: auth,
        office: office,
        page: try resource("admin", "html")
    ).register(on: router)
    OperationsRoutes(pool: pool, publisher: publisher, openAPIDocument: try resource("openapi", "yaml")).register(on: router)

    routes.load(from: router)
    // The exporter and pools first, so stopped last.
    let pools: [any Service] = observability + [pool] + (replica.map { [$0] } ?? [])

    return Application(
        router: router,
        server: .http1(configuration: .init(
            additionalChannelHandlers: [
                ProtocolErrorProblemHandler(), TransferGuardHandler(limits: settings.transferLimits), WriteGateHandler(),
            ],
            idleTimeout: .milliseconds(Int64(settings.http.idleTimeout * 1000)))),
        configuration: .init(address: .hostname("0.0.0.0", port: configuration.port), serverName: "syncline-gateway"),
        services: pools + [
            ResourceCloser { await publisher.shutdown() },
            background,  // stopped after the server: intake slots and erasures still running are waited for
            JobRelay(jobs: jobs, marks: marks, publisher: publisher, relayAfter: settings.relayAfter, logger: logger),
            views,
        ],
        logger: logger)
}

/// A text file shipped in the gateway's resources (`openapi.yaml`, `admin.html`).
func resource(_ name: String, _ type: String) throws -> String {
    guard let url = Bundle.module.url(forResource: name, withExtension: type) else {
        throw Configuration.Invalid(description: "\(name).\(type) is missing from the gateway's resources")
    }
    return try String(contentsOf: url, encoding: .utf8)
}
