import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import SyncModels
#if canImport(Network)
import Network
#endif

/// The device side of Syncline: a durable local store and outbox, optimistic local writes
/// by the server's merge rules, and a sync loop that pushes, follows jobs, pulls and
/// listens to the live stream.
///
/// ```swift
/// let client = try SyncClient(ClientConfiguration(
///     gatewayURL: URL(string: "https://sync.example.com")!, fanoutURL: URL(string: "https://live.example.com")!,
///     databasePath: documents + "/sync.sqlite", tokenProvider: { refresh in try await auth.token(refresh: refresh) }))
/// await client.start()
/// try await client.upsert("todos", id: "t1", data: ["title": .string("Buy milk")])
/// for await todos in await client.observe("todos") { render(todos) }
/// ```
///
/// One client syncs one space (the personal one unless `spaceID` is set) into its own
/// local store; `client(for:databasePath:)` makes the client of another space on the same
/// device.
public actor SyncClient {
    let configuration: ClientConfiguration
    let store: LocalStore
    let api: ServerAPI
    /// This device's registration, shared with the clients of its other spaces.
    let registration: DeviceRegistration
    /// What the app should know about its edits and jobs. Every access is a subscription of
    /// its own, receiving the events from then on: any number of consumers may listen.
    public nonisolated var events: AsyncStream<SyncEvent> { eventSink.subscribe() }
    let eventSink = Broadcast<SyncEvent>(buffer: 1_000)
    /// Records typed reads left out and reported, so each version is reported once.
    let undecodable = ReportedOnce<UndecodableRecord>()
    /// The sync status now and whenever it changes (a write, a confirmation, a pull, an
    /// error, the stream connecting): what a status badge binds to instead of polling
    /// `status()`. Every access is a subscription of its own; a slow consumer gets the latest.
    public nonisolated var statusUpdates: AsyncStream<SyncStatus> { statusSink.subscribe() }
    let statusSink = Broadcast<SyncStatus>(buffer: 1, replaysLatest: true)
    /// Recomputes the status off the caller's path, once per burst of changes.
    let statusWork: CoalescedWork<StatusSnapshot>

    var loop: Task<Void, Never>?
    var stream: Task<Void, Never>?
    var observers: [UUID: QueryObserver] = [:]
    var lastSyncAt: Date?
    var lastError: SyncFailure?
    /// The trace id the last push was sent with (`traceparent`).
    var lastPushTraceID: String?
    var live = false
    /// Outcomes of this device's jobs heard on the stream, until the jobs are settled (the
    /// stream may tell before the push's 202 is stored).
    var heardJobs: [String: HeardJob] = [:]
    /// The app's rules as held (nil: not read yet), when they were last looked up, and
    /// whether an answer named a newer version since.
    var rulesHeld: HeldRules?
    var rulesCheckedAt: Date?
    var rulesStale = false
    /// What the next pass does and how long the loop waits after it.
    var schedule: SyncSchedule
    /// The furthest the server has shown this space to be (a succeeded job's checkpoint, a
    /// poke's cursor): pulls ask for at least it, so a server reading from a replica that
    /// lags still shows this device its own writes.
    var reachedCursor: Int64 = 0
    var lastPullAt: Date?
    var lastStreamMessageAt = Date()
    var maxBatchBytes = 1_000_000
    var wakeup = WakeState()
    var passTurns = TakingTurns<CheckedContinuation<PassTurn, Never>>()
    /// The space the stream's `hello` named: pokes of other spaces are not this client's.
    var streamSpace: String?
    /// The device signed out and its data was deleted (`signOut(wipe: true)`).
    var wiped = false
    /// The stream's wait before reconnecting, and whether its backoff starts over
    /// (`networkAvailable()`).
    var streamNap: Task<Void, Never>?
    var streamBackoffReset = false
    #if canImport(Network)
    /// Tells the client when the network comes back (`SyncClient+NetworkPath.swift`).
    var pathMonitor: NWPathMonitor?
    #endif

    public init(_ configuration: ClientConfiguration) throws {
        try self.init(configuration, registration: nil)
    }

    /// A client; `registration` is the device's, when another client of it exists.
    init(_ configuration: ClientConfiguration, registration: DeviceRegistration?) throws {
        self.configuration = configuration
        schedule = SyncSchedule(pollInterval: configuration.pollInterval)
        store = try LocalStore(path: configuration.databasePath, space: configuration.spaceID, indexes: configuration.indexes)
        if let device = configuration.deviceID, try store.meta("device_id") == nil { try store.setMeta("device_id", device) }
        let stored = try store.meta("device_id")
        self.registration = registration ?? DeviceRegistration(deviceID: stored)
        let sessionConfiguration = URLSessionConfiguration.default
        sessionConfiguration.httpMaximumConnectionsPerHost = 4
        api = ServerAPI(
            base: configuration.gatewayURL, session: URLSession(configuration: sessionConfiguration),
            tokenProvider: configuration.tokenProvider)
        let (store, sink, now) = (store, statusSink, configuration.now)
        let last = LastStatus()
        statusWork = CoalescedWork(merge: { $1 }) { snapshot in
            guard let status = try? Self.status(store, snapshot, now: now()), last.changed(to: status) else { return }
            sink.yield(status)
        }
        statusWork.request(StatusSnapshot(lastSyncAt: nil, lastError: nil, lastPushTraceID: nil, live: false))
    }

    // MARK: - Lifecycle

    /// Starts syncing in the background: registers the device on first launch (when the
    /// server can be reached), then pushes, pulls and listens until `stop()`.
    public func start() {
        guard loop == nil, !wiped else { return }
        loop = Task { await self.runLoop() }
        if configuration.fanoutURL != nil { stream = Task { await self.runStream() } }
        #if canImport(Network)
        pathMonitor = watchNetworkPath()
        #endif
    }

    /// Stops syncing; the local store keeps everything. Writes still work while stopped.
    public func stop() async {
        let tasks = [loop, stream].compactMap { $0 }
        loop = nil
        stream = nil
        #if canImport(Network)
        pathMonitor?.cancel()
        pathMonitor = nil
        #endif
        tasks.forEach { $0.cancel() }
        wake()
        for task in tasks { await task.value }
        live = false
        statusChanged()
    }

    /// Signs this device out: syncing stops (`start()` after the next sign-in resumes). With
    /// `wipe` (a shared device), its data goes too — the local store, its files and the
    /// device's identity are deleted — and this client can no longer be used
    /// (`ClientError.signedOut`; its live queries stop): the next sign-in makes a new
    /// client, a new device. Returns how many edits the server had not confirmed: with
    /// `wipe` they are lost (`try await sync()` first sends them).
    @discardableResult
    public func signOut(wipe: Bool = false) async throws -> Int {
        if wiped { throw ClientError.signedOut }
        let unsent = try store.status().pending
        await stop()
        guard wipe else { return unsent }
        wiped = true
        // No observer's refresh nor status may be reading the database when it closes.
        let observing = observers.values
        observers = [:]
        for observer in observing { await observer.cancelAndWait() }
        await statusWork.cancelAndWait()
        try store.wipe()
        return unsent
    }

    /// The id the server gave this device (nil until it was first reached).
    public var deviceID: String? { try? store.meta("device_id") }

    // MARK: - Writes

    /// Replaces the record's fields with `data` (fields missing from it disappear).
    @discardableResult
    public func upsert(_ collection: String, id: String, data: [String: JSONValue], ifVersion: Int64? = nil) throws -> String {
        try write(Op(opID: Self.newID(), type: .upsert, collection: collection, id: id, data: data, ifVersion: ifVersion))
    }

    /// Sets the given fields; a `.null` value removes one.
    @discardableResult
    public func patch(_ collection: String, id: String, fields: [String: JSONValue], ifVersion: Int64? = nil) throws -> String {
        try write(Op(opID: Self.newID(), type: .patch, collection: collection, id: id, data: fields, ifVersion: ifVersion))
    }

    @discardableResult
    public func delete(_ collection: String, id: String, ifVersion: Int64? = nil) throws -> String {
        try write(Op(opID: Self.newID(), type: .delete, collection: collection, id: id, ifVersion: ifVersion))
    }

    /// Publishes the record under `publicID`: listed (or, with `listed: false`, readable by
    /// link only), and forkable unless `canFork` is false.
    @discardableResult
    public func publish(_ collection: String, id: String, publicID: String, canFork: Bool = true, listed: Bool = true) throws -> String {
        try write(Op(
            opID: Self.newID(), type: .publish, collection: collection, id: id, publicID: publicID, canFork: canFork,
            listed: listed))
    }

    @discardableResult
    public func unpublish(_ collection: String, id: String) throws -> String {
        try write(Op(opID: Self.newID(), type: .unpublish, collection: collection, id: id))
    }

    /// Copies the published record `publicID` into `(collection, id)` when the server
    /// applies it; the copy shows after the next pull.
    @discardableResult
    public func fork(_ collection: String, id: String, publicID: String) throws -> String {
        try write(Op(opID: Self.newID(), type: .fork, collection: collection, id: id, publicID: publicID))
    }

    /// Adds `by` to the counter in `field` (0 when absent): increments from every device add
    /// up, each counted once however often it is sent; a whole write of the field newer than
    /// an increment overrules it. Shown at once.
    @discardableResult
    public func increment(_ collection: String, id: String, field: String, by amount: JSONValue, ifVersion: Int64? = nil) throws -> String {
        try write(Op(opID: Self.newID(), type: .increment, collection: collection, id: id, ifVersion: ifVersion, field: field, by: amount))
    }

    /// Adds `values` to the set held in the array `field`: an element is there when an add of
    /// it is newer than every remove of it. Shown at once.
    @discardableResult
    public func add(_ collection: String, id: String, field: String, values: [JSONValue], ifVersion: Int64? = nil) throws -> String {
        try write(Op(opID: Self.newID(), type: .add, collection: collection, id: id, ifVersion: ifVersion, field: field, values: values))
    }

    /// Takes `values` out of the set held in the array `field` (an add newer than this keeps
    /// its element). Shown at once.
    @discardableResult
    public func remove(_ collection: String, id: String, field: String, values: [JSONValue], ifVersion: Int64? = nil) throws -> String {
        try write(Op(opID: Self.newID(), type: .remove, collection: collection, id: id, ifVersion: ifVersion, field: field, values: values))
    }

    /// Asks the app's backend (the collection's hook) to run `name` with `args` on the
    /// record. `guess` shows at once, as a patch would, until the backend's answer is pulled;
    /// a refusal comes as a `rejected` event (`hook:<reason>`).
    @discardableResult
    public func call(_ collection: String, id: String, name: String, args: JSONValue = .null, guess: [String: JSONValue]? = nil) throws -> String {
        try write(Op(opID: Self.newID(), type: .call, collection: collection, id: id, name: name, args: args), guess: guess)
    }

    /// The app's rules as this device holds them, read from the store once and again after
    /// a lookup kept a new version.
    func heldRules() throws -> HeldRules {
        if let held = rulesHeld { return held }
        let held = try HeldRules.read(store, space: configuration.spaceID)
        rulesHeld = held
        return held
    }

    /// Durable in the outbox and applied locally when this returns; returns the op_id.
    /// A space that is gone takes no more writes. An op the server would refuse is refused
    /// here (`ClientError.invalidOp`), before it is stored: it never reaches the outbox,
    /// so it can never hold up the ops around it.
    func write(_ op: Op, guess: [String: JSONValue]? = nil) throws -> String {
        if wiped { throw ClientError.signedOut }
        if store.spaceGone { throw ClientError.spaceGone }
        do {
            try PushValidation.check(op)
            if let guess { try PushValidation.check(Op(opID: op.opID, type: .patch, collection: op.collection, id: op.id, data: guess)) }
        } catch {
            throw ClientError.invalidOp(detail: error.detail)
        }
        if let refusal = try heldRules().screen(op) { throw ClientError.refusedByRule(rule: refusal.rule, detail: refusal.detail) }
        let stored = try store.enqueue(op, guess: guess, device: try node(), now: configuration.now())
        notify([RecordKey(collection: stored.collection, id: stored.id)])
        wake()
        return stored.opID
    }

    /// The HLC node of this device's ops: chosen locally on first use, so that writes work
    /// before the device could ever reach the server.
    func node() throws -> String {
        if let node = try store.meta("node") { return node }
        let node = Self.newID()
        try store.setMeta("node", node)
        return node
    }

    static func newID() -> String { UUID().uuidString.lowercased() }

    // MARK: - Reads

    public func record(_ collection: String, id: String) throws -> LocalRecord? {
        try store.record(collection, id)
    }

    /// The collection's records as this device shows them, by id (deleted ones are not).
    public func records(_ collection: String) throws -> [LocalRecord] {
        try store.records(in: collection)
    }

    /// The records the query selects, in its order. Declared indexes (`ClientConfiguration.indexes`)
    /// on the fields it filters and orders by keep it fast on large collections.
    public func records(_ query: RecordQuery) throws -> [LocalRecord] {
        try store.records(query)
    }

    /// How many records the query's filter keeps.
    public func count(_ query: RecordQuery) throws -> Int {
        try store.count(query)
    }

    /// Yields the collection's records now and after every local write or pulled change to it.
    public func observe(_ collection: String) -> AsyncStream<[LocalRecord]> {
        observe(collection, id: nil)
    }

    /// Yields the record (an empty array while it does not exist or is deleted) now and
    /// after every change to it.
    public func observe(_ collection: String, id: String?) -> AsyncStream<[LocalRecord]> {
        // A query on the id or on nothing cannot be invalid.
        (try? observe(RecordQuery(collection, where: id.map { Field.id == .string($0) }))) ?? AsyncStream { $0.finish() }
    }

    /// Yields the query's results now and whenever they change. A change that cannot affect
    /// them does not wake the query; the results are read off the write path (a write never
    /// waits for an observer) and a consumer slower than the changes gets the latest only.
    public func observe(_ query: RecordQuery) throws -> AsyncStream<[LocalRecord]> {
        try observe(query) { $0 }
    }

    func observe<Element: Sendable>(
        _ query: RecordQuery, _ transform: @escaping @Sendable ([LocalRecord]) -> Element
    ) throws -> AsyncStream<Element> {
        if wiped { throw ClientError.signedOut }
        _ = try QuerySQL.select(query)  // refuses an invalid query here, not in the background
        let (stream, sink) = AsyncStream.makeStream(of: Element.self, bufferingPolicy: .bufferingNewest(1))
        let key = UUID()
        let observer = QueryObserver(query: query, store: store) { sink.yield(transform($0)) }
        observers[key] = observer
        sink.onTermination = { _ in
            observer.cancel()
            Task { await self.removeObserver(key) }
        }
        return stream
    }

    func removeObserver(_ key: UUID) { observers[key] = nil }

    /// Wakes the observers the changed records may concern.
    func notify(_ keys: some Sequence<RecordKey>) {
        var changed: [String: Set<String>] = [:]
        for key in keys { changed[key.collection, default: []].insert(key.id) }
        for observer in observers.values {
            if let ids = changed[observer.query.collection] { observer.changed(.records(ids)) }
        }
        statusChanged()
    }

    /// Wakes the observers of these collections, whatever changed in them.
    func notify(collections: Set<String>) {
        for observer in observers.values where collections.contains(observer.query.collection) { observer.changed(.all) }
        statusChanged()
    }

    /// Wakes every observer.
    func notifyAll() {
        observers.values.forEach { $0.changed(.all) }
        statusChanged()
    }

    /// Why an edit has not synced yet.
    public func status() throws -> SyncStatus {
        try Self.status(store, StatusSnapshot(lastSyncAt: lastSyncAt, lastError: lastError, lastPushTraceID: lastPushTraceID, live: live), now: configuration.now())
    }

    /// Why the last pass failed.
    struct SyncFailure: Sendable, Equatable {
        let error: SyncError
        let detail: String
    }

    /// What the sync loop knows of the status; the store knows the rest.
    struct StatusSnapshot: Sendable {
        let lastSyncAt: Date?
        let lastError: SyncFailure?
        let lastPushTraceID: String?
        let live: Bool
    }

    static func status(_ store: LocalStore, _ snapshot: StatusSnapshot, now: Date) throws -> SyncStatus {
        let counts = try store.status()
        let uploads = try store.pendingUploadTotals()
        return SyncStatus(
            pendingOps: counts.pending, oldestPendingAge: counts.oldest.map { now.timeIntervalSince1970 - $0 },
            lastSyncAt: snapshot.lastSyncAt, error: snapshot.lastError?.error, lastError: snapshot.lastError?.detail,
            lastPushTraceID: snapshot.lastPushTraceID,
            setAsideOps: counts.setAside, live: snapshot.live,
            pendingUploads: uploads.count, pendingUploadBytes: uploads.bytes)
    }

    /// The status may have changed: `statusUpdates` gets it if it did.
    func statusChanged() {
        statusWork.request(StatusSnapshot(lastSyncAt: lastSyncAt, lastError: lastError, lastPushTraceID: lastPushTraceID, live: live))
    }

    /// The last status delivered, so an unchanged one is not delivered again.
    final class LastStatus: Sendable {
        private let delivered = Locked<SyncStatus?>(nil)

        func changed(to status: SyncStatus) -> Bool {
            let last = delivered.withLock { last in
                defer { last = status }
                return last
            }
            guard let last else { return true }
            // The age of the oldest pending op grows by itself: only whether there is one counts.
            return status.pendingOps != last.pendingOps || (status.oldestPendingAge == nil) != (last.oldestPendingAge == nil)
                || status.lastSyncAt != last.lastSyncAt || status.lastError != last.lastError || status.error != last.error
                || status.lastPushTraceID != last.lastPushTraceID
                || status.setAsideOps != last.setAsideOps || status.live != last.live
                || status.pendingUploads != last.pendingUploads || status.pendingUploadBytes != last.pendingUploadBytes
        }
    }

    /// Ops the server refused, waiting for the app.
    public func setAside() throws -> [SetAsideOp] { try store.setAside() }

    /// Sends a set-aside op again (after the app fixed what the server refused, or when a
    /// dead job's cause is gone).
    public func retry(opID: String) throws {
        guard let key = try store.resolveSetAside(opID: opID, retry: true) else { throw ClientError.notSetAside(opID: opID) }
        notify([key])
        wake()
    }

    /// Gives up on a set-aside op; the record shows the server's state again.
    public func drop(opID: String) throws {
        guard let key = try store.resolveSetAside(opID: opID, retry: false) else { throw ClientError.notSetAside(opID: opID) }
        notify([key])
    }
}
