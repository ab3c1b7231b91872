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
/// The bearer token is the user's id: `configuration(user:)` sets it. Not served: members,
/// invitations, resumable (tus) uploads, public content and the admin API (they answer 501).
/// Every job succeeds at once unless `pauseJobs()` holds them; nothing is ever purged.
public final class FakeSyncServer: Sendable {
    private let core: FakeServerCore
    private let group: MultiThreadedEventLoopGroup
    private let listener: any Channel
    private let heartbeat: RepeatedTask
    /// How often an open stream hears a heartbeat (give clients this as `heartbeatInterval`).
    public let heartbeatInterval: Double
    /// Where the server listens: both the gateway's and the fanout's URL.
    public let url: URL

    private var backend: NIOLockedValueBox<FakeBackend> { core.backend }

    private init(heartbeatInterval: Double) async throws {
        core = FakeServerCore()
        group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        listener = try await FakeHTTPListener.bind(server: core, group: group)
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
        try await group.shutdownGracefully()
    }

    private func deliver(_ deliveries: [FakeBackend.Delivery]) { core.deliver(deliveries) }

    /// A client configuration for `user` against this server: its token is the user's id,
    /// the stream's heartbeat is this server's, and without a stream it polls every second.
    public func configuration(
        user: String, databasePath: String, spaceID: String? = nil, deviceID: String? = nil, indexes: [LocalIndex] = []
    ) -> ClientConfiguration {
        ClientConfiguration(
            gatewayURL: url, fanoutURL: url, databasePath: databasePath, spaceID: spaceID, deviceID: deviceID,
            tokenProvider: { _ in user }, pollInterval: 1, heartbeatInterval: heartbeatInterval, indexes: indexes)
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

/// What the connections share: the backend under its lock, and the open streams.
final class FakeServerCore: Sendable {
    let backend = NIOLockedValueBox(FakeBackend())
    private let streams = NIOLockedValueBox<[ObjectIdentifier: (stream: FakeBackend.Stream, channel: any Channel)]>([:])

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
