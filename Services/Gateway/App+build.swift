import AMQPBridge
import Auth
import Foundation
import Hummingbird
import Logging
import PQBridge
import Persistence
import ServiceSupport

/// Wires the gateway: stores over one pool, the publisher, the routes and the relay.
/// Tests build the same application.
func buildApplication(configuration: Configuration, logger: Logger) async throws -> some ApplicationProtocol {
    let signer = try JWTSigner(secret: try configuration.requireJWTSecret())
    let endpoint = try configuration.amqpEndpoint()
    let pool = PGPool(url: configuration.databaseURL, size: configuration.databasePoolSize, logger: logger)
    let publisher = AMQPPublisher(
        endpoint: endpoint, topology: SynclineTopology.topology, confirmTimeout: 2, logger: logger)
    let auth = Authenticator(signer: signer)
    let devices = DeviceStore(pool: pool)
    let jobs = JobStore(pool: pool)
    let marks = PublishedMarks()

    let router = Router(context: BasicRequestContext.self)
    router.addMiddleware {
        ProblemMiddleware()
        MetricsMiddleware()
    }
    DeviceRoutes(auth: auth, devices: devices).register(on: router)
    SyncRoutes(
        auth: auth, devices: devices, jobs: jobs, pulls: PullStore(pool: pool), publisher: publisher, marks: marks,
        maxClockSkewMilliseconds: Int64(configuration.maxClockSkew * 1000)
    ).register(on: router)
    OperationsRoutes(pool: pool, publisher: publisher, openAPIDocument: try openAPIDocument()).register(on: router)

    return Application(
        router: router,
        configuration: .init(address: .hostname("0.0.0.0", port: configuration.port), serverName: "syncline-gateway"),
        services: [
            ResourceCloser {
                await publisher.shutdown()
                await pool.shutdown()
            },
            JobRelay(jobs: jobs, marks: marks, publisher: publisher, relayAfter: configuration.relayAfter, logger: logger),
        ],
        logger: logger)
}

func openAPIDocument() throws -> String {
    guard let url = Bundle.module.url(forResource: "openapi", withExtension: "yaml") else {
        throw Configuration.Invalid(description: "openapi.yaml is missing from the gateway's resources")
    }
    return try String(contentsOf: url, encoding: .utf8)
}
