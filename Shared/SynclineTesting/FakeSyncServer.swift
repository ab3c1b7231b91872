import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import SyncModels
import SynclineClient

/// A Syncline server in the test process, for an app's own tests: no PostgreSQL, no
/// RabbitMQ, no services. It speaks the protocol on 127.0.0.1 — devices, push with its
/// idempotency key, jobs, pull, the live stream, spaces, whole-file uploads — and applies
/// pushes by the server's own validation, clock and merge rules, so clients sync through
/// it as through the real one. What the test then drives: edits from elsewhere, refused
/// ops, an unreachable server, a slow worker, a space that goes away.
///
/// ```swift
/// let server = try await FakeSyncServer.start()
/// let phone = try SyncClient(server.configuration(user: "alice", databasePath: phonePath))
/// let laptop = try SyncClient(server.configuration(user: "alice", databasePath: laptopPath))
/// await phone.start(); await laptop.start()
/// try await phone.save(Recipe(id: "r1", title: "Pancakes", minutes: 20))
/// // … the laptop shows it; server.records(of: "alice", in: "recipes") holds it.
/// try await server.shutdown()
/// ```
///
/// The bearer token names the user (`configuration(user:)` sets it up). Served besides:
/// members, invitations and resumable (tus) uploads. Not served: roles' changes, public
/// content and the admin API (they answer 501). Every job succeeds at once unless
/// `pauseJobs()` holds them or `deadLetterJobs(_:)` fails them; nothing is ever purged.
/// `waitUntilSynced(_:)` replaces a test's polling loops.
public final class FakeSyncServer: Sendable {
    private let core: FakeServerCore
    private let group: MultiThreadedEventLoopGroup
    private let listener: any Channel
    /// The listeners of named clients (`configuration(name:)`), each on a port of its own,
    /// and nil while the client is offline.
    private let named = NIOLockedValueBox<[String: (port: Int, listener: (any Channel)?)]>([:])
    private let heartbeat: RepeatedTask
    /// How often an open stream hears a heartbeat (give clients this as `heartbeatInterval`).
    public let heartbeatInterval: Double
    /// Where the server listens: both the gateway's and the fanout's URL.
    public let url: URL

    private var backend: NIOLockedValueBox<FakeBackend> { core.backend }

    private init(heartbeatInterval: Double) async throws {
        core = FakeServerCore()
        group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        listener = try await FakeHTTPListener.bind(server: core, group: group).get()
        url = URL(string: "http://127.0.0.1:\(listener.localAddress?.port ?? 0)")!
        self.heartbeatInterval = heartbeatInterval
        let core = core
        heartbeat = group.next().scheduleRepeatedTask(
            initialDelay: .milliseconds(Int64(heartbeatInterval * 1000)), delay: .milliseconds(Int64(heartbeatInterval * 1000))
        ) { _ in
            core.deliver([FakeBackend.Delivery(to: { _ in true }, message: StreamMessage(json: .object(["type": "heartbeat"])))])
        }
    }

    /// Starts a server on a free port of 127.0.0.1.
    public static func start(heartbeatInterval: Double = 5) async throws -> FakeSyncServer {
        try await FakeSyncServer(heartbeatInterval: heartbeatInterval)
    }

    /// Closes every connection and stops listening.
    public func shutdown() async throws {
        heartbeat.cancel()
        core.closeStreams()
        try? await listener.close()
        for case let (_, listener?) in named.withLockedValue({ Array($0.values) }) { try? await listener.close() }
        try await group.shutdownGracefully()
    }

    private func deliver(_ deliveries: [FakeBackend.Delivery]) { core.deliver(deliveries) }

    /// A client configuration for `user` against this server: its store in memory unless
    /// `databasePath` says where, its tokens issued by this server (`expireTokens(of:)`),
    /// the stream's heartbeat this server's, and without a stream it polls every second.
    /// `name` names the client for `setOffline(_:_:)` (one device of several): it then
    /// reaches the server through a port of its own.
    public func configuration(
        user: String, databasePath: String = ":memory:", spaceID: String? = nil, deviceID: String? = nil,
        indexes: [LocalIndex] = [], name: String? = nil
    ) throws -> ClientConfiguration {
        let core = core
        let tokens = name ?? UUID().uuidString
        let url = try name.map(namedURL) ?? url
        return ClientConfiguration(
            gatewayURL: url, fanoutURL: url, databasePath: databasePath, spaceID: spaceID, deviceID: deviceID,
            tokenProvider: { refresh in core.backend.withLockedValue { $0.token(user: user, client: tokens, refresh: refresh) } },
            pollInterval: 1, heartbeatInterval: heartbeatInterval, indexes: indexes)
    }

    /// The address of the client `name`: its own listener, opened on first use.
    private func namedURL(_ name: String) throws -> URL {
        let port = try named.withLockedValue { named -> Int in
            if let known = named[name] { return known.port }
            let listener = try FakeHTTPListener.bind(server: core, group: group).wait()
            let port = listener.localAddress?.port ?? 0
            named[name] = (port, listener)
            return port
        }
        return URL(string: "http://127.0.0.1:\(port)")!
    }

    /// Syncs each client in turn, twice — every edit each made before the call reaches the
    /// server, then every other client — and throws the first client's failure (a
    /// `ClientError`) or at `timeout`. Jobs must not be paused.
    public func waitUntilSynced(_ clients: SyncClient..., timeout: Double = 10) async throws {
        let deadline = Date().addingTimeInterval(timeout)
        for _ in 0..<2 {
            for client in clients { try await client.sync(timeout: max(0.05, deadline.timeIntervalSinceNow)) }
        }
    }

    // MARK: - What the test drives

    /// Records as the server holds them in `collection` of the user's personal space (or of
    /// `space`), by id; deleted ones are left out.
    public func records(of user: String, in collection: String, space: String? = nil) -> [String: [String: JSONValue]] {
        backend.withLockedValue { backend in
            guard let spaceID = backend.space(space, of: user), let space = backend.spaces[spaceID] else { return [:] }
            var records: [String: [String: JSONValue]] = [:]
            for (key, record) in space.records where key.collection == collection && record.state.exists && !record.state.deleted {
                records[key.id] = record.state.fields
            }
            return records
        }
    }

    /// Applies ops as another device of `user` would push them (to the user's personal space,
    /// or to `space`): the streams are poked, the clients pull. Returns the ops' results;
    /// none while jobs are paused (the job waits with the others).
    @discardableResult
    public func write(_ ops: [Op], as user: String, space: String? = nil) throws -> [OpResult] {
        var deliveries: [FakeBackend.Delivery] = []
        let results = try backend.withLockedValue { backend -> [OpResult] in
            guard let spaceID = backend.space(space, of: user) else { throw FakeServerError.noSuchSpace }
            for op in ops {
                do throws(ValidationFailure) {
                    try PushValidation.check(op)
                } catch {
                    throw FakeServerError.invalidOp(error.detail)
                }
            }
            return backend.submit(ops, user: user, device: "another-device", space: spaceID, &deliveries).results
        }
        deliver(deliveries)
        return results
    }

    /// An upsert by another device of `user`.
    @discardableResult
    public func upsert(_ collection: String, id: String, data: [String: JSONValue], as user: String, space: String? = nil) throws -> OpResult? {
        try write([Op(opID: UUID().uuidString.lowercased(), type: .upsert, collection: collection, id: id, data: data)], as: user, space: space).first
    }

    /// A delete by another device of `user`.
    @discardableResult
    public func delete(_ collection: String, id: String, as user: String, space: String? = nil) throws -> OpResult? {
        try write([Op(opID: UUID().uuidString.lowercased(), type: .delete, collection: collection, id: id)], as: user, space: space).first
    }

    /// From now on, each pushed op `rule` answers for is refused (nil: the op goes through).
    /// `nil` for the rule refuses nothing again.
    public func refuse(_ rule: (@Sendable (Op) -> Refusal?)?) {
        backend.withLockedValue { $0.refusal = rule }
    }

    /// While unavailable, every request is answered 503 and no stream opens; open streams end.
    public func setUnavailable(_ unavailable: Bool) {
        backend.withLockedValue { $0.unavailable = unavailable }
        if unavailable { deliver([FakeBackend.Delivery(to: { _ in true }, message: nil)]) }
    }

    /// Takes the client `name` (a configuration's) off the network, or puts it back:
    /// offline, its connections (its stream's too) are closed and new ones refused, as a
    /// device without a network sees it.
    public func setOffline(_ name: String, _ offline: Bool) throws {
        let (core, group) = (core, group)
        try named.withLockedValue { named in
            guard let known = named[name] else { return }
            if offline, let listener = known.listener {
                try listener.close().wait()
                core.closeConnections(port: known.port)
                named[name] = (known.port, nil)
            } else if !offline, known.listener == nil {
                named[name] = (known.port, try FakeHTTPListener.bind(server: core, group: group, port: known.port).wait())
            }
        }
    }

    /// Expires every token issued to `user` so far: the next request is answered 401
    /// (`token: expired`) and the client asks its provider for a fresh token, which works.
    public func expireTokens(of user: String) {
        backend.withLockedValue { $0.validFrom[user] = $0.tokenGeneration + 1 }
    }

    /// While signed out, every token of `user` is refused (401, `token: invalid`), fresh
    /// ones too: the client's status says `.signInRequired`.
    public func setSignedOut(_ user: String, _ signedOut: Bool) {
        backend.withLockedValue { backend in
            if signedOut { backend.signedOut.insert(user) } else { backend.signedOut.remove(user) }
        }
    }

    /// How often `user`'s clients asked for a fresh token.
    public func tokenRefreshes(of user: String) -> Int { backend.withLockedValue { $0.refreshes[user] ?? 0 } }

    /// Answers the next `count` requests (any client) 429 with `Retry-After: retryAfter`.
    public func rateLimit(next count: Int, retryAfter: Int = 1) {
        backend.withLockedValue { $0.throttled = (count, retryAfter) }
    }

    /// From now on, a pushed job `rule` gives a reason for is dead-lettered with it instead
    /// of applied (its ops are set aside on the device, `SyncEvent.jobDead`); nil applies
    /// every job again.
    public func deadLetterJobs(_ rule: (@Sendable ([Op]) -> String?)?) {
        backend.withLockedValue { $0.deadLetter = rule }
    }

    /// The ops a device reported it set aside, by op id, with their reasons.
    public func setAsideReports(of device: String) -> [String: String] {
        backend.withLockedValue { $0.setAsideReports[device] ?? [:] }
    }

    /// Holds pushed jobs queued, as a slow worker would, until `resumeJobs()`.
    public func pauseJobs() {
        backend.withLockedValue { $0.jobsPaused = true }
    }

    /// Applies the jobs held, in order, and applies the next ones at once again.
    public func resumeJobs() {
        var deliveries: [FakeBackend.Delivery] = []
        backend.withLockedValue { backend in
            backend.jobsPaused = false
            backend.runJobs(&deliveries)
        }
        deliver(deliveries)
    }

    /// How many pushed jobs wait (while paused).
    public var queuedJobs: Int { backend.withLockedValue { $0.queued.count } }

    /// A shared space owned by `owner`; give its id to clients as `spaceID`.
    public func createSpace(name: String, owner: String) -> String {
        backend.withLockedValue { $0.createSpace(name: name, owner: owner) }
    }

    /// Makes `user` a member of `space` with `role` (as an accepted invitation would).
    public func addMember(_ user: String, to space: String, as role: SpaceRole = .editor) throws {
        try backend.withLockedValue { backend in
            guard backend.spaces[space] != nil else { throw FakeServerError.noSuchSpace }
            backend.spaces[space]?.members[user] = role
        }
    }

    /// Deletes a shared space as its owner would: its clients' next pull answers 404, and
    /// they report `SyncEvent.editsLost` (for edits not applied yet) and `.spaceGone`.
    public func deleteSpace(_ space: String) {
        var deliveries: [FakeBackend.Delivery] = []
        backend.withLockedValue { $0.deleteSpace(space, &deliveries) }
        deliver(deliveries)
    }

    /// Removes `user` from `space`: for that user, the space is gone.
    public func removeMember(_ user: String, from space: String) {
        backend.withLockedValue { _ = $0.spaces[space]?.members.removeValue(forKey: user) }
        deliver([FakeBackend.Delivery(to: { $0.user == user && $0.space == space }, message: nil)])
    }
}

/// What the connections share: the backend under its lock, the open streams, and every
/// connection by the port it came in on.
final class FakeServerCore: Sendable {
    let backend = NIOLockedValueBox(FakeBackend())
    private let streams = NIOLockedValueBox<[ObjectIdentifier: (stream: FakeBackend.Stream, channel: any Channel)]>([:])
    private let connections = NIOLockedValueBox<[ObjectIdentifier: (port: Int, channel: any Channel)]>([:])

    func accepted(_ channel: any Channel) {
        let key = ObjectIdentifier(channel)
        connections.withLockedValue { $0[key] = (channel.localAddress?.port ?? 0, channel) }
        channel.closeFuture.whenComplete { [connections] _ in _ = connections.withLockedValue { $0.removeValue(forKey: key) } }
    }

    func closeConnections(port: Int) {
        let closing = connections.withLockedValue { $0.values.filter { $0.port == port }.map(\.channel) }
        for channel in closing { channel.close(promise: nil) }
    }

    func answer(_ request: FakeRequest) -> FakeAnswer {
        var deliveries: [FakeBackend.Delivery] = []
        let answer = backend.withLockedValue { $0.answer(request, deliveries: &deliveries) }
        deliver(deliveries)
        return answer
    }

    /// Opens a stream on `channel`: its first message, or the answer refusing it.
    func openStream(_ request: FakeRequest, channel: any Channel) -> FakeBackend.StreamOpening {
        backend.withLockedValue { backend in
            let opening = backend.openStream(request)
            if case .opened(let stream, _) = opening {
                streams.withLockedValue { $0[ObjectIdentifier(channel)] = (stream, channel) }
            }
            return opening
        }
    }

    func streamEnded(_ channel: any Channel) {
        _ = streams.withLockedValue { $0.removeValue(forKey: ObjectIdentifier(channel)) }
    }

    /// Sends each message to the streams it is for, in order; a nil message ends them.
    func deliver(_ deliveries: [FakeBackend.Delivery]) {
        guard !deliveries.isEmpty else { return }
        let open = streams.withLockedValue { Array($0.values) }
        for (stream, channel) in open {
            for delivery in deliveries where delivery.to(stream) {
                if let message = delivery.message {
                    channel.writeAndFlush(HTTPServerResponsePart.body(.byteBuffer(ByteBuffer(string: message.event))), promise: nil)
                } else {
                    channel.writeAndFlush(HTTPServerResponsePart.end(nil)).whenComplete { _ in channel.close(promise: nil) }
                    break
                }
            }
        }
    }

    func closeStreams() {
        let open = streams.withLockedValue { streams in
            defer { streams.removeAll() }
            return streams.values.map(\.channel)
        }
        for channel in open { channel.close(promise: nil) }
    }
}

/// Why the test's own call to the fake server failed.
public enum FakeServerError: Error, Sendable, Equatable {
    case noSuchSpace
    /// The op breaks the server's rules (`detail` says which).
    case invalidOp(String)
}
