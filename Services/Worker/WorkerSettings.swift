import ServiceSupport

/// What the worker reads besides the shared settings.
struct WorkerSettings: Sendable {
    /// Job messages a worker holds unacknowledged.
    var prefetch: Int
    /// Transactions a worker runs at once, each applying one batch of jobs.
    var concurrency: Int
    /// The most jobs one transaction applies.
    var batchJobs: Int
    /// The most ops one transaction applies (a job with more goes alone).
    var batchOps: Int

    init(_ reader: EnvironmentReader) throws {
        prefetch = min(try reader.int("WORKER_PREFETCH", 128), Int(UInt16.max))
        concurrency = try reader.int("WORKER_CONCURRENCY", 4)
        batchJobs = try reader.int("WORKER_BATCH_JOBS", 32)
        batchOps = try reader.int("WORKER_BATCH_OPS", 2_000)
    }
}
