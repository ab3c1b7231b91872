import SyncModels
@testable import SynclineClient
import Testing

/// The Swift client's sync loop policy: when the next pass runs and what it does.
struct SyncScheduleTests {
    @Test func aFirstPassPullsAndAsksForJobs() {
        let schedule = SyncSchedule(pollInterval: 30)
        #expect(schedule.pullWanted)
        #expect(schedule.followUp(heard: nil, live: true) == .ask)
    }

    @Test func withNothingRunningTheLoopWaitsForAWakeOrTheNextPoll() {
        var schedule = SyncSchedule(pollInterval: 30)
        #expect(schedule.wait(after: .synced(jobsInFlight: false), live: false) == 30)
        #expect(schedule.wait(after: .synced(jobsInFlight: false), live: true) == nil, "a live stream wakes the loop")
        var noPolling = SyncSchedule(pollInterval: nil)
        #expect(noPolling.wait(after: .synced(jobsInFlight: false), live: false) == nil)
    }

    @Test func runningJobsArePolledAtDoublingIntervalsUpToASecondWithoutAStream() {
        var schedule = SyncSchedule(pollInterval: 30)
        let waits = (0..<7).map { _ in schedule.wait(after: .synced(jobsInFlight: true), live: false) }
        #expect(waits == [0.05, 0.1, 0.2, 0.4, 0.8, 1, 1])
        // Once nothing runs, the next job is polled from the shortest interval again.
        _ = schedule.wait(after: .synced(jobsInFlight: false), live: false)
        #expect(schedule.wait(after: .synced(jobsInFlight: true), live: false) == 0.05)
    }

    @Test func withALiveStreamRunningJobsAreLeftToItForTenSeconds() {
        var schedule = SyncSchedule(pollInterval: 30)
        #expect(schedule.wait(after: .synced(jobsInFlight: true), live: true) == SyncSchedule.liveJobWait)
        schedule.jobsFollowed(live: true)
        #expect(schedule.followUp(heard: nil, live: true) == .wait)
        // Nothing was heard within the wait: the jobs are asked for.
        schedule.waitedInVain(live: true)
        #expect(schedule.followUp(heard: nil, live: true) == .ask)
    }

    @Test func failuresBackOffWithJitterAndTheServersRetryAfter() {
        var schedule = SyncSchedule(pollInterval: 30)
        // `random` 1 is the ceiling: 0.25 s doubling, capped at 30 s.
        let ceilings = (0..<9).map { _ in schedule.wait(after: .failed(retryAfter: nil), live: false, random: 1) }
        #expect(ceilings == [0.25, 0.5, 1, 2, 4, 8, 16, 30, 30])
        #expect(schedule.wait(after: .failed(retryAfter: nil), live: false, random: 0.5) == 15, "full jitter")
        #expect(schedule.wait(after: .failed(retryAfter: 45), live: false, random: 0) == 45, "never sooner than the server asked")
        // A pass that syncs resets the backoff.
        _ = schedule.wait(after: .synced(jobsInFlight: false), live: false)
        #expect(schedule.wait(after: .failed(retryAfter: nil), live: false, random: 1) == 0.25)
    }

    @Test func aPollThatTimesOutPullsOnlyWithoutAStream() {
        var schedule = SyncSchedule(pollInterval: 30)
        schedule.pullWanted = false
        schedule.waitedInVain(live: true)
        #expect(!schedule.pullWanted, "a live stream pokes when there is something to pull")
        schedule.waitedInVain(live: false)
        #expect(schedule.pullWanted)
        var noPolling = SyncSchedule(pollInterval: nil)
        noPolling.pullWanted = false
        noPolling.waitedInVain(live: false)
        #expect(!noPolling.pullWanted)
    }

    @Test func whatTheStreamToldDecidesWhetherAJobIsAskedFor() {
        var schedule = SyncSchedule(pollInterval: 30)
        schedule.jobsFollowed(live: true)
        let clean = HeardJob(status: "succeeded", checkpoint: 7, troubled: false)
        let troubled = HeardJob(status: "succeeded", checkpoint: 7, troubled: true)
        let dead = HeardJob(status: "dead", checkpoint: nil, troubled: true)
        #expect(schedule.followUp(heard: clean, live: true) == .settle)
        #expect(schedule.followUp(heard: troubled, live: true) == .ask, "its results say which ops were refused")
        #expect(schedule.followUp(heard: dead, live: true) == .ask)
        #expect(schedule.followUp(heard: nil, live: true) == .wait)
        #expect(schedule.followUp(heard: nil, live: false) == .ask, "without a stream every job is asked for")
    }

    @Test func aStreamOpenedOrAnOverdueOutcomeAsksForJobsOnce() {
        var schedule = SyncSchedule(pollInterval: 30)
        schedule.jobsFollowed(live: true)
        schedule.streamOpened()
        #expect(schedule.followUp(heard: nil, live: true) == .ask)
        schedule.jobsFollowed(live: true)
        #expect(schedule.followUp(heard: nil, live: true) == .wait)
        schedule.outcomeOverdue()
        #expect(schedule.followUp(heard: nil, live: true) == .ask)
        // Without a stream, asking never stops.
        schedule.jobsFollowed(live: false)
        #expect(schedule.followUp(heard: nil, live: true) == .ask)
    }
}
