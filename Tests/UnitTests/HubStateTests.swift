import Foundation
import NIOConcurrencyHelpers
import SyncModels
import Testing

@testable import Fanout

/// A fanout replica's streams as a value — admission, the bind of a user's routing key,
/// who gets which event, ended memberships and the periodic duties — driven by the test's
/// own clock, without a broker or a socket.
struct HubStateTests {
    /// The id a short name stands for in these tests ("a", "s1"): the same each time.
    static func id<Kind>(_ name: String) -> Identifier<Kind> {
        let hex = name.utf8.map { String($0, radix: 16) }.joined()
        return Identifier(UUID(uuidString: "00000000-0000-4000-8000-" + String(repeating: "0", count: 12 - hex.count) + hex)!)
    }
    static func device(_ name: String) -> DeviceID { id(name) }
    static func space(_ name: String) -> SpaceID { id(name) }
    static let job: JobID = id("j")

    /// A stream for the state (what it is sent is what the state's answers say).
    struct Stream {
        let subscriber: HubState.Subscriber

        init(device: String, space: String? = nil, expiresAt: Double = .infinity) {
            subscriber = HubState.Subscriber(
                id: UUID(), deviceID: HubStateTests.device(device), space: space.map(HubStateTests.space), sink: Unsent(), expiresAt: expiresAt)
        }

        struct Unsent: StreamSink {
            func send(_ message: StreamMessage) {}
            func finish() {}
        }

        var id: UUID { subscriber.id }
    }

    /// Subscribes as the hub does: resumed at once unless told to wait, then resumed by
    /// whoever reports the bind. Returns the admission it ends with.
    static func subscribe(_ state: NIOLockedValueBox<HubState>, user: UserID, _ stream: Stream) async -> Task<HubState.Admission, any Error> {
        let (registration, registered) = AsyncStream.makeStream(of: Void.self)
        let task = Task {
            try await withCheckedThrowingContinuation { waiter in
                let admission = state.withLockedValue { $0.subscribe(user: user, stream.subscriber, waiter: waiter) }
                registered.finish()
                admission.settle(waiter)
            }
        }
        for await _ in registration {}
        return task
    }

    /// Streams admitted one after the other, the user's key bound by the first.
    static func connect(_ state: NIOLockedValueBox<HubState>, user: UserID, _ streams: [Stream]) async {
        for stream in streams {
            if await admission(await subscribe(state, user: user, stream)) == .success(.bind) {
                _ = state.withLockedValue { $0.bindFinished(user: user, succeeded: true) }
            }
        }
    }

    static func admission(_ task: Task<HubState.Admission, any Error>) async -> Result<HubState.Admission, HubState.Refusal> {
        do {
            return .success(try await task.value)
        } catch {
            return .failure(error as! HubState.Refusal)
        }
    }

    static func event(
        user: UserID = "u", device: String, status: JobStatus = .succeeded, checkpoint: String? = "7", refused: Bool = false,
        space: String? = nil
    ) -> JobEvent {
        JobEvent(
            userID: user, deviceID: Self.device(device), jobID: Self.job, status: status, checkpoint: checkpoint, hasRefusedOps: refused,
            spaceID: space.map(Self.space))
    }

    @Test func theFirstStreamOfAUserBindsAndTheOthersWaitForIt() async throws {
        let state = NIOLockedValueBox(HubState(streamsPerUser: 3, intervals: .init(heartbeat: 25), now: 0))
        let first = await Self.subscribe(state, user: "u", Stream(device: "a"))
        #expect(await Self.admission(first) == .success(.bind))
        let second = await Self.subscribe(state, user: "u", Stream(device: "b"))
        let third = await Self.subscribe(state, user: "u", Stream(device: "c"))
        let waiters = state.withLockedValue { $0.bindFinished(user: "u", succeeded: true) }
        #expect(waiters.count == 2)
        waiters.forEach { $0.resume(returning: .ready) }
        #expect(await Self.admission(second) == .success(.ready))
        #expect(await Self.admission(third) == .success(.ready))
        #expect(state.withLockedValue { $0.isBound(user: "u") })
        // Over the cap: refused, and not registered.
        #expect(await Self.admission(await Self.subscribe(state, user: "u", Stream(device: "d"))) == .failure(.tooMany))
        #expect(state.withLockedValue { $0.users["u"]?.count } == 3)
        // Another user binds their own key.
        #expect(await Self.admission(await Self.subscribe(state, user: "v", Stream(device: "e"))) == .success(.bind))
    }

    @Test func aFailedBindIsForgottenSoTheNextStreamBindsAgain() async throws {
        let state = NIOLockedValueBox(HubState(streamsPerUser: 3, intervals: .init(heartbeat: 25), now: 0))
        let binder = Stream(device: "a")
        #expect(await Self.admission(await Self.subscribe(state, user: "u", binder)) == .success(.bind))
        let waiting = await Self.subscribe(state, user: "u", Stream(device: "b"))
        let waiters = state.withLockedValue { $0.bindFinished(user: "u", succeeded: false) }
        waiters.forEach { $0.resume(throwing: HubState.Refusal.closed) }
        #expect(await Self.admission(waiting) == .failure(.closed), "the waiter learns of the failure")
        #expect(!state.withLockedValue { $0.isBound(user: "u") })
        #expect(await Self.admission(await Self.subscribe(state, user: "u", Stream(device: "c"))) == .success(.bind))
    }

    @Test func theLastStreamOfAUserLeavingForgetsTheirBind() async throws {
        let state = NIOLockedValueBox(HubState(streamsPerUser: 3, intervals: .init(heartbeat: 25), now: 0))
        let a = Stream(device: "a"), b = Stream(device: "b")
        _ = await Self.admission(await Self.subscribe(state, user: "u", a))
        state.withLockedValue { _ = $0.bindFinished(user: "u", succeeded: true) }
        #expect(await Self.admission(await Self.subscribe(state, user: "u", b)) == .success(.ready))
        #expect(state.withLockedValue { $0.unsubscribe(user: "u", id: a.id)?.wasLast } == false)
        #expect(state.withLockedValue { $0.unsubscribe(user: "u", id: a.id) } == nil, "a stream ends once")
        #expect(state.withLockedValue { $0.unsubscribe(user: "u", id: b.id)?.wasLast } == true)
        #expect(!state.withLockedValue { $0.isConnected(user: "u") })
        #expect(await Self.admission(await Self.subscribe(state, user: "u", Stream(device: "c"))) == .success(.bind))
    }

    @Test func theOriginDeviceGetsItsJobsOutcomeAndTheOthersAPoke() async throws {
        let state = NIOLockedValueBox(HubState(streamsPerUser: 5, intervals: .init(heartbeat: 25), now: 0))
        let origin = Stream(device: "a"), other = Stream(device: "b"), narrowed = Stream(device: "c", space: "s2")
        await Self.connect(state, user: "u", [origin, other, narrowed])
        func sent(_ event: JobEvent) -> [UUID: StreamMessage] {
            Dictionary(uniqueKeysWithValues: state.withLockedValue { $0.deliveries(of: event, now: 1) }.map { ($0.subscriber.id, $0.message) })
        }
        #expect(sent(Self.event(device: "a", space: "s1")) == [
            origin.id: .job(jobID: Self.job, status: .succeeded, checkpoint: "7", troubled: false),
            other.id: .poke(cursor: "7", space: Self.space("s1")),
        ])
        #expect(sent(Self.event(device: "a", refused: true, space: "s2"))[origin.id]
            == .job(jobID: Self.job, status: .succeeded, checkpoint: "7", troubled: true))
        #expect(sent(Self.event(device: "a", space: "s2"))[narrowed.id] == .poke(cursor: "7", space: Self.space("s2")))
        // A failed job pokes nobody; its device learns it went wrong.
        #expect(sent(Self.event(device: "a", status: .dead, checkpoint: nil)) == [
            origin.id: .job(jobID: Self.job, status: .dead, checkpoint: nil, troubled: true),
        ])
        #expect(sent(Self.event(user: "nobody", device: "a")).isEmpty)
    }

    @Test func anEndedMembershipIsNotPokedForAWhileAndItsNarrowedStreamsEnd() async throws {
        let state = NIOLockedValueBox(HubState(streamsPerUser: 5, intervals: .init(heartbeat: 25, endedMembership: 10), now: 0))
        let everything = Stream(device: "b"), narrowed = Stream(device: "c", space: "s")
        await Self.connect(state, user: "u", [everything, narrowed])
        #expect(state.withLockedValue { $0.left(user: "u", space: Self.space("s"), now: 100) } == [narrowed.id])
        let late = Self.event(device: "a", space: "s")
        #expect(state.withLockedValue { $0.deliveries(of: late, now: 105) }.allSatisfy { $0.subscriber.id != everything.id })
        #expect(state.withLockedValue { $0.deliveries(of: late, now: 110) }.contains { $0.subscriber.id == everything.id })
        // Joining again (a stream of the space was authorized) is a membership again at once.
        _ = state.withLockedValue { $0.left(user: "u", space: Self.space("s"), now: 200) }
        await Self.connect(state, user: "u", [Stream(device: "d", space: "s")])
        #expect(state.withLockedValue { $0.deliveries(of: late, now: 201) }.contains { $0.subscriber.id == everything.id })
    }

    @Test func registrationAndRebindsComeDueOnTheStatesOwnClock() async throws {
        let box = NIOLockedValueBox(HubState(streamsPerUser: 5, intervals: .init(heartbeat: 25), now: 0))
        _ = await Self.admission(await Self.subscribe(box, user: "u", Stream(device: "a")))
        var state = box.withLockedValue { $0 }

        var duties = state.tick(now: 0.2, consumerConnection: 0, consumerConnected: false)
        #expect(duties.register && duties.heartbeats.isEmpty && duties.markSeen == nil && duties.rebind == nil)
        // Registration is retried every tick until it succeeds, then every 30 s.
        #expect(state.tick(now: 0.4, consumerConnection: 0, consumerConnected: false).register)
        state.registered(now: 0.4)
        #expect(!state.tick(now: 30, consumerConnection: 0, consumerConnected: false).register)
        #expect(state.tick(now: 30.4, consumerConnection: 0, consumerConnected: false).register)
        state.registered(now: 30.4)

        // The consumer connects: every user's key is bound again, said to follow a reconnect.
        duties = state.tick(now: 31, consumerConnection: 1, consumerConnected: true)
        #expect(duties.rebind?.users == ["u"] && duties.rebind?.connection == 1 && duties.rebind?.afterReconnect == true)
        state.rebound(connection: 1)
        #expect(state.tick(now: 32, consumerConnection: 1, consumerConnected: true).rebind == nil)
        // Then once a minute as a safety net, and at once after the next reconnect.
        #expect(state.tick(now: 91, consumerConnection: 1, consumerConnected: true).rebind?.afterReconnect == false)
        #expect(state.tick(now: 92, consumerConnection: 2, consumerConnected: true).rebind?.afterReconnect == true)
    }

    @Test func heartbeatsAndSeenMarksComeDueOnTheStatesOwnClock() async throws {
        let box = NIOLockedValueBox(HubState(streamsPerUser: 5, intervals: .init(heartbeat: 25), now: 0))
        let stream = Stream(device: "a")
        _ = await Self.admission(await Self.subscribe(box, user: "u", stream))
        var state = box.withLockedValue { $0 }
        #expect(state.tick(now: 24, consumerConnection: 0, consumerConnected: false).heartbeats.isEmpty)
        #expect(state.tick(now: 25, consumerConnection: 0, consumerConnected: false).heartbeats.map(\.id) == [stream.id])
        #expect(state.tick(now: 49, consumerConnection: 0, consumerConnected: false).heartbeats.isEmpty)
        #expect(state.tick(now: 50, consumerConnection: 0, consumerConnected: false).heartbeats.count == 1)
        #expect(state.tick(now: 3599, consumerConnection: 0, consumerConnected: false).markSeen == nil)
        #expect(state.tick(now: 3600, consumerConnection: 0, consumerConnected: false).markSeen == [Self.device("a")])
        #expect(state.tick(now: 3601, consumerConnection: 0, consumerConnected: false).markSeen == nil)
    }

    /// A stream ends when the token it was opened with expires; the others go on.
    @Test func aStreamIsEndedWhenItsTokenExpires() async throws {
        let box = NIOLockedValueBox(HubState(streamsPerUser: 5, intervals: .init(heartbeat: 25), now: 0))
        let short = Stream(device: "a", expiresAt: 60), long = Stream(device: "b", expiresAt: 3600)
        await Self.connect(box, user: "u", [short, long])
        var state = box.withLockedValue { $0 }
        #expect(state.tick(now: 59.9, consumerConnection: 0, consumerConnected: false).expired.isEmpty)
        let due = state.tick(now: 60, consumerConnection: 0, consumerConnected: false).expired
        #expect(due.map(\.id) == [short.id] && due.map(\.user) == ["u"])
        _ = state.unsubscribe(user: "u", id: short.id)
        #expect(state.tick(now: 61, consumerConnection: 0, consumerConnected: false).expired.isEmpty)
        #expect(state.tick(now: 3600, consumerConnection: 0, consumerConnected: false).expired.map(\.id) == [long.id])
    }

    @Test func closingEndsEveryStreamAndAdmitsNoMore() async throws {
        let state = NIOLockedValueBox(HubState(streamsPerUser: 5, intervals: .init(heartbeat: 25), now: 0))
        let a = Stream(device: "a"), b = Stream(device: "b")
        _ = await Self.admission(await Self.subscribe(state, user: "u", a))
        _ = await Self.admission(await Self.subscribe(state, user: "v", b))
        #expect(Set(state.withLockedValue { $0.close() }.map(\.id)) == [a.id, b.id])
        #expect(await Self.admission(await Self.subscribe(state, user: "u", Stream(device: "c"))) == .failure(.closed))
        #expect(!state.withLockedValue { $0.isConnected(user: "u") })
    }
}
