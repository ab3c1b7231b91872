import Foundation
import SyncModels

/// Everything a fanout replica knows about its streams, as a value: who is connected,
/// whose routing key is bound, which memberships ended lately, and when each periodic duty
/// is next due. Each change returns what the `Hub` must then do — messages to send, streams
/// to finish, a bind to make or wait for, duties to run — and the hub does it outside its
/// lock. Time comes in as `now` (seconds on a monotonic clock), so tests drive it with
/// their own.
struct HubState {
    struct Subscriber {
        let id: UUID
        let deviceID: DeviceID
        /// The one space the stream is narrowed to; nil: every space of the user.
        let space: SpaceID?
        let sink: any StreamSink
        /// When its token expires (on the monotonic clock): the stream is ended then.
        var expiresAt: Double = .infinity
        /// When it opened (RFC 3339), for the support console.
        var openedAt = Timestamp.format(Date())

        func covers(_ space: SpaceID?) -> Bool { self.space == nil || space == nil || self.space == space }
    }

    struct Membership: Hashable {
        let user: UserID
        let space: SpaceID
    }

    /// A user's routing key: being bound by their first stream (the others wait for it, so
    /// none says `hello` before its pokes can arrive), or bound.
    enum Bind {
        case binding(waiters: [Waiter])
        case bound
    }

    /// A subscribing stream's wait for its admission.
    typealias Waiter = CheckedContinuation<Admission, any Error>

    /// Why a stream was not admitted.
    enum Refusal: Error, Equatable {
        case closed
        /// The user holds `streamsPerUser` streams here already.
        case tooMany
    }

    /// What a subscribing stream does next.
    enum Admission: Equatable {
        case refused(Refusal)
        /// It binds the user's routing key, then reports `bindFinished`.
        case bind
        /// It waits, its waiter kept, until the stream binding the key reports.
        case wait
        /// Nothing: the key is bound.
        case ready

        /// Whether the stream was registered (every admission but a refusal).
        var admitted: Bool {
            if case .refused = self { return false }
            return true
        }

        /// Resumes the subscribing stream's waiter with this admission — unless it is
        /// `.wait`: then the stream that binds resumes it (`bindFinished`).
        func settle(_ waiter: Waiter) {
            switch self {
            case .refused(let refusal): waiter.resume(throwing: refusal)
            case .bind, .ready: waiter.resume(returning: self)
            case .wait: break
            }
        }
    }

    /// A message for one stream.
    struct Delivery {
        let subscriber: Subscriber
        let message: StreamMessage
    }

    /// What the periodic loop does at a tick.
    struct Duties {
        /// The devices streaming here, to mark as seen (a device streaming for days is in
        /// use though it never pushes).
        var markSeen: [DeviceID]?
        /// Refresh this replica's queue in the registry, with its streams as they are now
        /// (for the support console); report `registered`.
        var register = false
        var streams: [Subscriber] = []
        var heartbeats: [Subscriber] = []
        /// Streams whose token has expired: to be ended.
        var expired: [(user: UserID, id: UUID)] = []
        /// Bind these users' keys again (after a reconnect, or as a periodic safety net);
        /// report `rebound`.
        var rebind: (users: [UserID], connection: Int, afterReconnect: Bool)?
    }

    /// Intervals of the periodic duties, in seconds.
    struct Intervals {
        var heartbeat: Double
        var markSeen: Double = 3600
        var register: Double = 30
        var rebind: Double = 60
        /// How long an ended membership is remembered: a poke computed before the removal
        /// committed but arriving after its announcement is not delivered.
        var endedMembership: Double = 10
    }

    let streamsPerUser: Int
    let intervals: Intervals
    private(set) var users: [UserID: [UUID: Subscriber]] = [:]
    private var binds: [UserID: Bind] = [:]
    private var left: [Membership: Double] = [:]
    private(set) var closed = false
    private var lastHeartbeat: Double
    private var lastMarkedSeen: Double
    private var lastRegistered = -Double.infinity
    /// Streams opened or ended since the registry last had them: written within a second.
    private var streamsChanged = false
    private var lastRebind: Double
    /// The consumer connection whose bindings were last made whole.
    private var boundFor = 0

    init(streamsPerUser: Int, intervals: Intervals, now: Double) {
        self.streamsPerUser = streamsPerUser
        self.intervals = intervals
        lastHeartbeat = now
        lastMarkedSeen = now
        lastRebind = now
    }

    /// Whether the user holds fewer streams here than they may.
    func admits(user: UserID) -> Bool { (users[user]?.count ?? 0) < streamsPerUser }

    /// Registers a stream of `user`. The caller settles `waiter` with the admission
    /// (`Admission.settle`); on `.wait` the waiter is kept, and resumed when the key is bound.
    mutating func subscribe(user: UserID, _ subscriber: Subscriber, waiter: Waiter) -> Admission {
        if closed { return .refused(.closed) }
        if !admits(user: user) { return .refused(.tooMany) }
        users[user, default: [:]][subscriber.id] = subscriber
        streamsChanged = true
        // A stream of the space was authorized just now: the user is a member again.
        if let space = subscriber.space { left[Membership(user: user, space: space)] = nil }
        switch binds[user] {
        case .bound?: return .ready
        case .binding(let waiters)?:
            binds[user] = .binding(waiters: waiters + [waiter])
            return .wait
        case nil:
            binds[user] = .binding(waiters: [])
            return .bind
        }
    }

    /// Whether the user's key is bound.
    func isBound(user: UserID) -> Bool {
        if case .bound? = binds[user] { return true }
        return false
    }

    /// The bind of the user's key finished; returns the streams that waited for it, to be
    /// resumed (`.ready`, or the error when it failed: the next stream tries again).
    mutating func bindFinished(user: UserID, succeeded: Bool) -> [Waiter] {
        guard case .binding(let waiters) = binds[user] else { return [] }
        binds[user] = succeeded && users[user] != nil ? .bound : nil
        return waiters
    }

    /// Removes a stream; returns it (to be finished) and whether it was the user's last,
    /// whose key may then be unbound.
    mutating func unsubscribe(user: UserID, id: UUID) -> (ended: Subscriber, wasLast: Bool)? {
        guard let subscriber = users[user]?.removeValue(forKey: id) else { return nil }
        streamsChanged = true
        guard users[user]?.isEmpty == true else { return (subscriber, false) }
        users[user] = nil
        if case .bound? = binds[user] { binds[user] = nil }
        return (subscriber, true)
    }

    /// Whether the user has a stream here.
    func isConnected(user: UserID) -> Bool { users[user] != nil }

    /// A job event for its user's streams that cover its space: a poke to every other
    /// device (unless the membership ended lately); to the origin device, the job's outcome,
    /// so that it need not ask for it.
    func deliveries(of event: JobEvent, now: Double) -> [Delivery] {
        guard let subscribers = users[event.userID]?.values else { return [] }
        let member = event.spaceID
            .flatMap { left[Membership(user: event.userID, space: $0)] }
            .map { now - $0 >= intervals.endedMembership } ?? true
        var deliveries: [Delivery] = []
        for subscriber in subscribers where subscriber.covers(event.spaceID) {
            if subscriber.deviceID == event.deviceID {
                let troubled = event.hasRefusedOps || event.status != .succeeded
                let outcome = StreamMessage.job(jobID: event.jobID, status: event.status, checkpoint: event.checkpoint, troubled: troubled)
                deliveries.append(Delivery(subscriber: subscriber, message: outcome))
            } else if member, let cursor = event.checkpoint, event.status == .succeeded {
                deliveries.append(Delivery(subscriber: subscriber, message: .poke(cursor: cursor, space: event.spaceID)))
            }
        }
        return deliveries
    }

    /// The streams of a revoked device (every device of the user when `deviceID` is nil).
    func streams(of user: UserID, device deviceID: DeviceID?) -> [UUID] {
        (users[user] ?? [:]).filter { deviceID == nil || $0.value.deviceID == deviceID }.map(\.key)
    }

    /// The user left the space: remembered for a while, and their streams narrowed to it
    /// returned (to be ended). Their streams of every space stay: the worker pokes only
    /// members, so that space's pokes stop there too.
    mutating func left(user: UserID, space: SpaceID, now: Double) -> [UUID] {
        left[Membership(user: user, space: space)] = now
        return (users[user] ?? [:]).filter { $0.value.space == space }.map(\.key)
    }

    /// What is due at `now`, given the consumer's connection count and whether it is
    /// connected.
    mutating func tick(now: Double, consumerConnection connection: Int, consumerConnected: Bool) -> Duties {
        var duties = Duties()
        if now - lastMarkedSeen >= intervals.markSeen {
            lastMarkedSeen = now
            duties.markSeen = Array(Set(users.values.flatMap { $0.values.map(\.deviceID) })).sorted()
        }
        duties.register = now - lastRegistered >= intervals.register || (streamsChanged && now - lastRegistered >= 1)
        if duties.register {
            streamsChanged = false
            duties.streams = users.values.flatMap(\.values)
        }
        duties.expired = expire(now: now)
        if now - lastHeartbeat >= intervals.heartbeat {
            lastHeartbeat = now
            left = left.filter { now - $0.value < intervals.endedMembership }
            duties.heartbeats = users.values.flatMap(\.values)
        }
        if consumerConnected, connection != boundFor || now - lastRebind >= intervals.rebind {
            lastRebind = now
            duties.rebind = (users.keys.sorted(), connection, connection != boundFor)
        }
        return duties
    }

    /// The streams whose token has expired by `now`.
    private func expire(now: Double) -> [(user: UserID, id: UUID)] {
        users.flatMap { user, streams in streams.values.filter { $0.expiresAt <= now }.map { (user, $0.id) } }
    }

    /// The replica's queue was refreshed in the registry at `now`.
    mutating func registered(now: Double) { lastRegistered = now }

    /// Every connected user's key was bound again on `connection`.
    mutating func rebound(connection: Int) { boundFor = connection }

    /// Admits no more streams; returns every open one, to be finished.
    mutating func close() -> [Subscriber] {
        closed = true
        defer { users = [:] }
        return users.values.flatMap(\.values)
    }
}
