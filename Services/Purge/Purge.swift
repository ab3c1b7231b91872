import AMQPBridge
import ArgumentParser
import BlobStorage
import BrokerTopology
import Foundation
import HTTPSupport
import Hummingbird
import Logging
import Metrics
import Operations
import PQBridge
import Persistence
import ServiceLifecycle
import ServiceSupport
import SyncModels

/// Retention: `purge --once` for cron or a Kubernetes CronJob (exit status 0 when the run
/// completed or another purge was already running, non-zero on failure), or
/// `purge --every 1h` as a long-running service with `/healthz` `/readyz` `/metrics`.
/// The `purge` command (its own executable, or `syncline purge` in the container image).
public enum PurgeMain {
    public static func run(arguments: [String]) async { await Purge.main(arguments) }
}

struct Purge: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "purge",
        abstract: "Delete tombstones, finished jobs, op_ids, dead letters and stale devices past their retention.")

    @Flag(help: "Run one purge and exit.") var once = false
    @Option(help: "Run a purge this often (e.g. 1h) until stopped.") var every: String?

    func validate() throws {
        guard once != (every != nil) else { throw ValidationError("give exactly one of --once and --every") }
        if let every, (Durations.parse(every) ?? 0) <= 0 { throw ValidationError("--every must be a duration such as 1h") }
    }

    func run() async throws {
        let (configuration, (retention, blobStore, sweepInterval)) = Configuration.forService("purge", defaultPort: 8082) { reader in
            (PurgeStore.Retention(
                tombstones: try reader.duration("TOMBSTONE_RETENTION", "30d"), jobs: try reader.duration("JOB_RETENTION", "7d"),
                deadLetters: try reader.duration("DEAD_LETTER_RETENTION", "30d"),
                devices: try reader.duration("DEVICE_RETENTION", "90d"),
                publicIDReservation: try reader.duration("PUBLIC_ID_RESERVATION", "1d"),
                blobs: try reader.duration("BLOB_RETENTION", "7d")),
             try reader.blobStore(),
             try reader.duration("BLOB_SWEEP_INTERVAL", "1m"))
        }
        let logger = Observability.bootstrap(service: "purge", level: configuration.logLevel, format: configuration.logFormat)
        let pool = configuration.primaryPool(size: 2, logger: logger)
        let publisher = AMQPPublisher(
            endpoint: try configuration.amqpEndpoint(),
            topology: SynclineTopology.topology(retryDelays: configuration.retryDelays), logger: logger)
        let office = DeadLetterOffice(pool: pool, publisher: publisher, retryDelays: configuration.retryDelays, logger: logger)
        let catalog = BlobCatalog(pool: pool)
        let sweeper = BlobSweeper(catalog: catalog, stores: try BlobStores(blobStore, pool: pool), logger: logger)
        let runner = PurgeRunner(
            store: PurgeStore(pool: pool),
            office: office,
            eraser: AccountEraser(pool: pool, publisher: publisher, office: office, sweeper: sweeper, logger: logger),
            sweeper: sweeper,
            catalog: catalog,
            retention: retention,
            logger: logger)
        if once {
            do {
                _ = try await runner.runOnce()
            } catch {
                logger.error("purge failed", metadata: ["error": "\(error)"])
                await publisher.shutdown()
                await pool.shutdown()
                throw ExitCode.failure
            }
            await publisher.shutdown()
            await pool.shutdown()
            return
        }
        let router = Router(context: BasicRequestContext.self, options: .autoGenerateHeadEndpoints)
        OperationsEndpoints.register(on: router) {
            async let database = pool.ping()
            async let broker = publisher.ping()
            return ["database": await database, "broker": await broker]
        }
        let app = Application(
            router: router,
            configuration: .init(address: .hostname("0.0.0.0", port: configuration.port), serverName: "syncline-purge"),
            services: [
                pool,
                ResourceCloser { await publisher.shutdown() },
                PurgeLoop(runner: runner, interval: Durations.parse(every!)!),
                GarbageSweepLoop(sweeper: sweeper, interval: sweepInterval, logger: logger),
            ],
            logger: logger)
        await ServiceExit.run("purge", port: configuration.port) { try await app.runService() }
    }
}

/// One purge run, with its logs and metrics.
struct PurgeRunner: Sendable {
    let store: PurgeStore
    let office: DeadLetterOffice
    let eraser: AccountEraser
    let sweeper: BlobSweeper
    let catalog: BlobCatalog
    let retention: PurgeStore.Retention
    let logger: Logger

    /// The report, or nil when another purge was running.
    func runOnce() async throws -> PurgeStore.Report? {
        let started = Date()
        guard let report = try await store.run(retention) else {
            logger.notice("another purge is running; skipped")
            Counter(label: "syncline_purge_runs_total", dimensions: [("outcome", "skipped")]).increment()
            return nil
        }
        if report.deadLetters > 0 { await office.reconcile() } else { await office.moveRetiredQueues() }
        let resumed = try await eraser.resumeUnfinished()
        if resumed > 0 { logger.info("finished account deletions a stopped process left", metadata: ["accounts": "\(resumed)"]) }
        let removedObjects = try await sweeper.sweep()
        Gauge(label: "syncline_blob_stored_bytes").record(try await catalog.storedBytes())
        for (kind, count) in [
            ("tombstones", report.tombstones), ("jobs", report.jobs), ("op_ids", report.opIDs),
            ("dead_letters", report.deadLetters), ("devices", report.devices),
            ("released_public_ids", report.releasedPublicIDs), ("orphans", report.orphans), ("blobs", report.blobs),
            ("blob_objects", removedObjects), ("settled_records", report.settledRecords),
        ] {
            Counter(label: "syncline_purged_total", dimensions: [("kind", kind)]).increment(by: count)
        }
        Counter(label: "syncline_purge_runs_total", dimensions: [("outcome", "completed")]).increment()
        logger.info("purge completed", metadata: [
            "purged.tombstones": "\(report.tombstones)", "purged.jobs": "\(report.jobs)", "purged.op_ids": "\(report.opIDs)",
            "purged.dead_letters": "\(report.deadLetters)", "purged.devices": "\(report.devices)",
            "purged.released_public_ids": "\(report.releasedPublicIDs)", "purged.orphans": "\(report.orphans)",
            "purged.blobs": "\(report.blobs)", "purged.blob_objects": "\(removedObjects)",
            "purged.settled_records": "\(report.settledRecords)",
            "duration_ms": "\(Int(Date().timeIntervalSince(started) * 1000))",
        ])
        return report
    }
}

/// `--every`: a purge, then a wait, until SIGTERM. A failed run is logged and retried at
/// the next interval; it never ends the service.
struct PurgeLoop: Service {
    let runner: PurgeRunner
    let interval: Double

    func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            do {
                _ = try await runner.runOnce()
            } catch {
                Counter(label: "syncline_purge_runs_total", dimensions: [("outcome", "failed")]).increment()
                runner.logger.error("purge failed; next run at the next interval", metadata: ["error": "\(error)"])
            }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .seconds(interval)) }
        }
    }
}

/// Between purges, removes the objects other processes queued for removal (`blob_garbage`)
/// every `BLOB_SWEEP_INTERVAL`: a gateway that deletes a space or an account removes what
/// its own stores hold at once, and the bytes in a store only purge knows (a directory the
/// gateway is not given) go within this interval, not at the next purge.
struct GarbageSweepLoop: Service {
    let sweeper: BlobSweeper
    let interval: Double
    let logger: Logger

    func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .seconds(interval)) }
            guard !Task.isShuttingDownGracefully && !Task.isCancelled else { return }
            do {
                try await sweeper.sweep()
            } catch {
                logger.warning("removing queued blob objects failed; retried at the next sweep", metadata: ["error": "\(error)"])
            }
        }
    }
}
