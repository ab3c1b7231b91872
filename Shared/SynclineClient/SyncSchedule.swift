import SyncModels

/// The sync loop's policy, as a value: what the next pass does (pull? ask for running
/// jobs?) and how long the loop waits after a pass. It does no I/O and reads no clock, so
/// each rule has a unit test; `SyncClient` runs the passes and keeps one of these.
struct SyncSchedule: Sendable {
    /// How long, in seconds, a job may run with a live stream before it is asked for anyway
    /// (an outcome the stream lost).
    static let liveJobWait: Double = 10

    /// The next pass pulls: the server has something newer (a poke, a job that succeeded),
    /// a poll is due, or the last pull failed.
    var pullWanted = true
    /// The next pass asks the server for each running job: no stream has been live since
    /// they were sent, or one was (re)opened and may have missed an outcome.
    private(set) var askJobs = true
    /// Without a live stream, how often the loop pulls anyway (nil: only when woken).
    let pollInterval: Double?
    private var failures = Backoff()
    private var jobPolls = Backoff(base: 0.05, cap: 1)

    init(pollInterval: Double?) {
        self.pollInterval = pollInterval
    }

    /// How a pass ended.
    enum Outcome: Equatable {
        case synced(jobsInFlight: Bool)
        /// A failure: tried again after a backoff, and never sooner than `retryAfter`
        /// seconds when the server said so.
        case failed(retryAfter: Double?)
    }

    /// How long the loop waits for a wake after a pass, in seconds (nil: until woken).
    /// Failures back off with jitter (`random` in 0..<1); running jobs are polled at
    /// doubling intervals up to a second, or left to the stream while one is live.
    mutating func wait(after outcome: Outcome, live: Bool, random: Double = .random(in: 0..<1)) -> Double? {
        switch outcome {
        case .synced(let jobsInFlight):
            failures.reset()
            if jobsInFlight { return live ? Self.liveJobWait : jobPolls.next(random: 1) }
            jobPolls.reset()
            return live ? nil : pollInterval
        case .failed(let retryAfter):
            return failures.next(retryAfter: retryAfter, random: random)
        }
    }

    /// The wait ended with nothing waking the loop: running jobs are asked for, and
    /// without a stream a poll pulls.
    mutating func waitedInVain(live: Bool) {
        askJobs = true
        if !live, pollInterval != nil { pullWanted = true }
    }

    /// The network is back (or the app asked for a sync): failures back off from the start
    /// again, and the next pass pulls what was missed.
    mutating func networkBack() {
        failures.reset()
        jobPolls.reset()
        pullWanted = true
    }

    /// A stream said hello: outcomes told while none listened are asked for once.
    mutating func streamOpened() { askJobs = true }

    /// A job's outcome may have been lost (a sync waited long for it): asked for once.
    mutating func outcomeOverdue() { askJobs = true }

    /// What the pass does with one of this device's running jobs.
    enum FollowUp: Equatable {
        /// Settled from what the stream told: it succeeded and refused nothing.
        case settle
        /// Asked for: the stream told of trouble, or cannot be relied on.
        case ask
        /// Left running: the stream will tell.
        case wait
    }

    func followUp(heard: HeardJob?, live: Bool) -> FollowUp {
        if let heard, heard.status == JobStatus.succeeded.rawValue, !heard.troubled { return .settle }
        return heard != nil || askJobs || !live ? .ask : .wait
    }

    /// Every running job was followed up: with a stream live, none is asked for again
    /// until something says an outcome may have been missed.
    mutating func jobsFollowed(live: Bool) {
        if live { askJobs = false }
    }
}
