import Logging
import Persistence
import ServiceLifecycle

/// Until the tables the apply reads have statistics, analyzes each once it holds rows
/// (`FirstStatistics`), looking every two seconds, for ten minutes at most (autovacuum
/// has taken over by then, and a role that may not analyze them stops trying). On a
/// database that has statistics, one look and done.
struct StatisticsWarmup: Service {
    let statistics: FirstStatistics
    let logger: Logger

    func run() async throws {
        let deadline = ContinuousClock.now + .seconds(600)
        while !Task.isShuttingDownGracefully && !Task.isCancelled && ContinuousClock.now < deadline {
            do {
                if try await !statistics.analyzeGrownTables() { break }
            } catch {
                logger.info("could not look at the tables' statistics", metadata: ["error": "\(error)"])
            }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .seconds(2)) }
        }
        // A service that returns stops the worker: this one waits for the others.
        try? await gracefulShutdown()
    }
}
