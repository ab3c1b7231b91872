import AMQPBridge
import Auth
import BlobStorage
import BrokerTopology
import Foundation
import HTTPSupport
import Hummingbird
import Logging
import NIOCore
import Operations
import PQBridge
import Persistence
import ServiceLifecycle
import ServiceSupport

/// Wires the gateway: its parts, the routes over them, and the services that outlive a
/// request. `observability`: services that must stop last (the span exporter).
/// `onServerRunning`: told the listening channel (a test that asked for port 0 reads its port there).
func buildApplication(
    configuration: Configuration, settings: GatewaySettings, observability: [any Service] = [], logger: Logger,
    onServerRunning: @escaping @Sendable (any Channel) async -> Void = { _ in }
) async throws -> some ApplicationProtocol {
    let parts = try await GatewayParts(configuration: configuration, settings: settings, logger: logger)
    let router = try gatewayRouter(parts, configuration: configuration, settings: settings, logger: logger)
    let connections = ConnectionCounter(limits: settings.http.connectionLimits)
    // The exporter and pools first, so stopped last.
    let pools: [any Service] = observability + [parts.pool] + (parts.replica.map { [$0] } ?? [])
    return Application(
        router: router,
        server: .http1(configuration: .init(
            additionalChannelHandlers: [
                ConnectionLimitHandler(counter: connections), ProtocolErrorProblemHandler(), TransferGuardHandler(limits: settings.transferLimits, sendBufferBytes: settings.sendBuffer), WriteGateHandler(),
            ],
            idleTimeout: .milliseconds(Int64(settings.http.idleTimeout * 1000)))),
        configuration: .init(address: .hostname("0.0.0.0", port: configuration.port), serverName: "syncline-gateway"),
        services: pools + [
            ResourceCloser { [publisher = parts.publisher] in await publisher.shutdown() },
            // Stopped after the intake slots, so that its last pass marks the jobs they published
            // after the server stopped (unmarked, the next gateway would publish them again).
            JobRelay(jobs: parts.jobs, marks: parts.marks, publisher: parts.publisher, relayAfter: settings.relayAfter, logger: logger),
            parts.background,  // stopped after the server: intake slots and erasures still running are waited for
            parts.views.counts,
            parts.pullMarks.marks,
            parts.rules,
        ],
        onServerRunning: onServerRunning,
        logger: logger)
}

/// What the gateway's routes and services share: the pools, the publisher, the stores and
/// the limits.
struct GatewayParts {
    let pool: PGPool
    let replica: PGPool?
    let reads: ReadPools
    let publisher: AMQPPublisher
    let auth: Authenticator
    let jobs: JobStore
    let marks = PublishedMarks()
    let pullMarks: PullMarks
    let background = BackgroundWork()
    let pushLimiter: RateLimiter
    let publicLimiter: RateLimiter
    let views: ViewCounter
    let catalog: BlobCatalog
    let blobStores: BlobStores
    let sweeper: BlobSweeper
    let office: DeadLetterOffice
    /// The app's rules this gateway judges pushes by.
    let rules: RulesCache

    init(configuration: Configuration, settings: GatewaySettings, logger: Logger) async throws {
        pool = configuration.primaryPool(logger: logger)
        var replicaLogger = logger
        replicaLogger[metadataKey: "database"] = "replica"
        replica = settings.databaseReadURL.map { [size = configuration.databasePoolSize] in
            PGPool(
                url: $0, size: size, logger: replicaLogger, slowThreshold: configuration.slowThreshold,
                name: "replica", isSampled: Traces.isSampled)
        }
        reads = ReadPools(primary: pool, replica: replica, logger: logger)
        publisher = AMQPPublisher(
            endpoint: try configuration.amqpEndpoint(), topology: SynclineTopology.topology(retryDelays: configuration.retryDelays),
            confirmTimeout: 2, slowThreshold: configuration.slowThreshold, logger: logger)
        auth = Authenticator(verifier: try await configuration.tokenVerifier(logger: logger))
        jobs = JobStore(pool: pool)
        pushLimiter = RateLimiter(settings.pushRateLimit)
        publicLimiter = RateLimiter(settings.publicRateLimit)
        views = ViewCounter(store: PublicStore(pool: pool), logger: logger)
        catalog = BlobCatalog(pool: pool)
        blobStores = try BlobStores(settings.blobStore, pool: pool)
        sweeper = BlobSweeper(catalog: catalog, stores: blobStores, logger: logger)
        pullMarks = PullMarks(devices: DeviceStore(pool: pool), logger: logger)
        office = DeadLetterOffice(pool: pool, publisher: publisher, retryDelays: configuration.retryDelays, logger: logger)
        let rulesStore = RulesStore(pool: pool)
        rules = RulesCache(
            interval: configuration.rulesRefresh, logger: logger, version: rulesStore.currentVersion, load: rulesStore.current)
    }
}

/// The routes: public ones on the router, the rest behind `AuthenticationMiddleware` (and
/// the operators' behind `AdminOnlyMiddleware`), each group under the router's middleware.
func gatewayRouter(
    _ parts: GatewayParts, configuration: Configuration, settings: GatewaySettings, logger: Logger
) throws -> Router<GatewayRequestContext> {
    // A GET route answers HEAD too, with its header fields alone.
    let router = Router(context: GatewayRequestContext.self, options: .autoGenerateHeadEndpoints)
    let methods = RouteMethods()
    router.addMiddleware {
        RequestTelemetryMiddleware(logger: logger, slow: configuration.slowThreshold)
        CORSMiddleware(allowedOrigins: settings.http.corsAllowedOrigins, openPrefixes: ["/v1/public"])
        ProblemMiddleware(routes: methods)
        MetricsMiddleware()
    }
    if let filesOrigin = settings.publicFilesOrigin {
        router.add(middleware: PublicFilesOriginMiddleware(filesOrigin: filesOrigin))
    }
    // The data API takes service tokens, never users' (and the other routes never service tokens).
    let services = router.group().add(middleware: ServiceAuthenticationMiddleware(tokens: ServiceTokenStore(pool: parts.pool)))
        .group(context: ServiceRequestContext.self)
    let signedIn = router.group().add(middleware: AuthenticationMiddleware(parts.auth)).group(context: SignedInRequestContext.self)
    let admins = signedIn.group().add(middleware: AdminOnlyMiddleware())
    let pool = parts.pool, publisher = parts.publisher
    let spaces = SpaceStore(pool: pool)
    let (blobs, uploads) = fileRoutes(parts, spaces: spaces, settings: settings)
    let admin = AdminRoutes(office: parts.office, page: try resource("admin", "html"), supportPage: try resource("support", "html"))
    let rules = RulesRoutes(book: RulesBook(pool: pool), cache: parts.rules)

    router.addRoutes(PublicRoutes(records: PublicStore(reads: parts.reads), views: parts.views, limiter: parts.publicLimiter).routes)
    router.addRoutes(blobs.publicRoutes)
    router.addRoutes(uploads.publicRoutes)
    router.addRoutes(admin.pageRoutes)
    OperationsRoutes(pool: pool, publisher: publisher, openAPIDocument: try resource("openapi", "yaml")).register(on: router)
    signedIn.addRoutes(
        DeviceRoutes(devices: DeviceStore(pool: pool), publisher: publisher, allowPrivateWebhooks: configuration.allowPrivateWebhooks).routes)
    let sync = SyncRoutes(
        jobs: parts.jobs, pulls: PullStore(reads: parts.reads), spaces: spaces,
        intake: IntakeBatcher(
            jobs: parts.jobs, publisher: publisher, marks: parts.marks, slots: settings.intakeConcurrency,
            background: parts.background, logger: logger),
        maxClockSkewMilliseconds: Int64(settings.maxClockSkew * 1000), rules: parts.rules,
        limiter: parts.pushLimiter, publicIDLimiter: RateLimiter(settings.publicIDRateLimit), pullMarks: parts.pullMarks,
        readAhead: settings.pullReadAhead)
    signedIn.addRoutes(sync.routes)
    signedIn.addRoutes(blobs.routes)
    signedIn.addRoutes(uploads.routes)
    signedIn.addRoutes(SpaceRoutes(
        spaces: spaces, publisher: publisher, sweeper: parts.sweeper, background: parts.background,
        maxOpenInvitations: settings.maxOpenInvitations
    ).routes)
    signedIn.addRoutes(AccountRoutes(
        eraser: AccountEraser(pool: pool, publisher: publisher, office: parts.office, sweeper: parts.sweeper, logger: logger),
        inlineBudget: settings.accountDeletionInline, background: parts.background
    ).routes)
    signedIn.addRoutes(rules.routes)
    admins.addRoutes(admin.routes)
    admins.addRoutes(SupportRoutes(store: SupportStore(pool: pool), records: BackendRecordStore(pool: pool), audit: AuditStore(pool: pool)).routes)
    admins.addRoutes(rules.adminRoutes)
    admins.addRoutes(BackendAdminRoutes(access: BackendAccess(pool: pool, allowPrivate: configuration.allowPrivateWebhooks)).routes)
    services.addRoutes(ServiceRoutes(
        sync: sync, records: BackendRecordStore(reads: parts.reads), spaces: spaces, publisher: publisher).routes)
    methods.load(from: router)
    return router
}

/// The routes of files: whole (`PUT`/`GET`) and resumable (tus), under the same rules.
func fileRoutes(_ parts: GatewayParts, spaces: SpaceStore, settings: GatewaySettings) -> (BlobRoutes, UploadRoutes) {
    let ingest = BlobIngest(
        catalog: parts.catalog, stores: parts.blobStores, maxBytes: settings.blobMaxBytes, spaceQuota: settings.spaceBlobQuota)
    let rules = FileRules(
        spaces: spaces, catalog: parts.catalog, ingest: ingest, uploadsPerUser: ConcurrencyLimiter(limit: settings.uploadsPerUser))
    let blobs = BlobRoutes(
        rules: rules, spaces: spaces, catalog: parts.catalog, stores: parts.blobStores, limiter: parts.pushLimiter,
        publicLimiter: parts.publicLimiter, downloadsPerUser: ConcurrencyLimiter(limit: settings.downloadsPerUser),
        downloadsPerAddress: ConcurrencyLimiter(limit: settings.downloadsPerAddress),
        downloadPieces: DownloadPieces(budget: settings.downloadBuffer))
    let uploads = UploadRoutes(
        rules: rules, catalog: parts.catalog, limiter: parts.pushLimiter, expiresIn: settings.uploadExpiry,
        openPerUser: settings.openUploadsPerUser)
    return (blobs, uploads)
}

/// A text file shipped in the gateway's resources (`openapi.yaml`, `admin.html`).
func resource(_ name: String, _ type: String) throws -> String {
    guard let url = Bundle.module.url(forResource: name, withExtension: type) else {
        throw Configuration.Invalid(description: "\(name).\(type) is missing from the gateway's resources")
    }
    return try String(contentsOf: url, encoding: .utf8)
}
