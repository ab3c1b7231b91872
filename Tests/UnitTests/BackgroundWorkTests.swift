import Logging
import ServiceLifecycle
import ServiceSupport
import Testing

@Suite("Background work")
struct BackgroundWorkTests {
    actor Flag {
        var isSet = false
        func set() { isSet = true }
    }

    /// Stopping waits for the work in flight, then refuses more (which runs nothing).
    @Test func stoppingWaitsForWorkInFlightThenRefusesMore() async throws {
        let background = BackgroundWork()
        let group = ServiceGroup(configuration: .init(services: [background], logger: Logger(label: "test")))
        let done = Flag(), late = Flag()
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            #expect(background.submit {
                try? await Task.sleep(for: .milliseconds(300))
                await done.set()
            })
            try await Task.sleep(for: .milliseconds(50))
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
        #expect(await done.isSet, "the work in flight finished before the service stopped")
        #expect(!background.submit { await late.set() })
        try await Task.sleep(for: .milliseconds(50))
        #expect(await !late.isSet)
    }

    /// When the grace period ends, the work still running is cancelled.
    @Test func workIsCancelledWhenTheGracePeriodEnds() async throws {
        let background = BackgroundWork()
        var configuration = ServiceGroupConfiguration(services: [background], logger: Logger(label: "test"))
        configuration.maximumGracefulShutdownDuration = .milliseconds(100)
        let group = ServiceGroup(configuration: configuration)
        let cancelled = Flag()
        let started = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            background.submit {
                do { try await Task.sleep(for: .seconds(30)) } catch { await cancelled.set() }
            }
            try await Task.sleep(for: .milliseconds(50))
            await group.triggerGracefulShutdown()
            try? await tasks.waitForAll()
        }
        #expect(await cancelled.isSet)
        // Well before the work's own 30 s: cancelled, not waited out. (Not tighter: a
        // test process on a busy machine can stall for seconds.)
        #expect(ContinuousClock.now - started < .seconds(20))
    }
}
