import Foundation
import SynclineClient
import SynclineTesting
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// SynclineTesting as an app's tests use it: clients sync through the fake server, and the
/// test drives what is hard to make happen against a real one — edits from elsewhere,
/// refused ops, an unreachable server, a space that goes away with edits not yet applied.
@Suite("The fake server for apps' tests", .timeLimit(.minutes(1)))
struct FakeSyncServerTests {
    struct Recipe: SyncRecord, Equatable {
        static let collection = "recipes"
        enum CodingKeys: String, CodingKey { case id, title, minutes }
        var id: String
        var title: String
        var minutes: Int
    }

    static func path() -> String { NSTemporaryDirectory() + "fake-\(UUID().uuidString).sqlite" }

    /// Waits (up to 10 s) until `condition` holds.
    static func until(_ what: String, _ condition: () async throws -> Bool) async throws {
        let deadline = Date().addingTimeInterval(10)
        while try await !condition() {
            guard Date() < deadline else {
                Issue.record("not within 10 s: \(what)")
                return
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// The events a client reports from now on, collected.
    final class Events: @unchecked Sendable {
        private let lock = NSLock()
        private var seen: [SyncEvent] = []
        private var task: Task<Void, Never>?

        init(_ client: SyncClient) {
            let stream = client.events
            task = Task { [weak self] in
                for await event in stream { self?.append(event) }
            }
        }

        private func append(_ event: SyncEvent) { lock.withLock { seen.append(event) } }
        var all: [SyncEvent] { lock.withLock { seen } }
        deinit { task?.cancel() }
    }

    /// Signing out keeps the data unless told to wipe it; a wipe (a shared device) deletes
    /// the store, its WAL and its files, counts the edits the server never had, and leaves
    /// a client that refuses to be used.
    @Test func signingOutWithWipeDeletesTheDevicesData() async throws {
        let server = try await FakeSyncServer.start()
        let path = Self.path()
        let phone = try SyncClient(server.configuration(user: "alice", databasePath: path))
        await phone.start()
        try await phone.save(Recipe(id: "r1", title: "Pancakes", minutes: 20))
        try await phone.sync(timeout: 10)
        #expect(try await phone.signOut() == 0)
        #expect(try await phone.fetch(Recipe.self, id: "r1") != nil, "a plain sign-out keeps the data")
        try await phone.save(Recipe(id: "r2", title: "Waffles", minutes: 15))
        #expect(FileManager.default.fileExists(atPath: path))
        #expect(try await phone.signOut(wipe: true) == 1, "the waffles never reached the server")
        for file in [path, path + "-wal", path + "-shm", path + ".blobs"] { #expect(!FileManager.default.fileExists(atPath: file), "\(file)") }
        await #expect(throws: ClientError.signedOut) { try await phone.save(Recipe(id: "r3", title: "Crêpes", minutes: 10)) }
        await #expect(throws: ClientError.signedOut) { try await phone.signOut(wipe: true) }
        #expect(server.records(of: "alice", in: "recipes").keys.sorted() == ["r1"])
        try await server.shutdown()
    }

    /// Signing out with a wipe while observers are refreshing (writes keep waking them)
    /// waits for their reads before it closes the database: nothing reads a closed store.
    @Test func signingOutWithWipeWhileObserversRefreshIsSafe() async throws {
        let server = try await FakeSyncServer.start()
        for round in 0..<5 {
            let path = Self.path()
            let phone = try SyncClient(server.configuration(user: "alice", databasePath: path))
            var readers: [Task<Void, Never>] = []
            for _ in 0..<4 {
                let stream = try await phone.observe(RecordQuery("recipes"))
                readers.append(Task { for await _ in stream {} })
            }
            for index in 0..<100 { try await phone.save(Recipe(id: "r\(index)", title: "Round \(round)", minutes: index)) }
            #expect(try await phone.signOut(wipe: true) == 100)
            #expect(!FileManager.default.fileExists(atPath: path))
            await #expect(throws: ClientError.signedOut) { _ = try await phone.observe(RecordQuery("recipes")) }
            for reader in readers { reader.cancel() }
        }
        try await server.shutdown()
    }

    /// After an outage long enough for the stream's backoff to grow, `networkAvailable()`
    /// starts every backoff over: the stream is back and another device's change shows
    /// within 2 s of the server's return (before, the stream waited out its backoff).
    @Test func changesFlowWithinTwoSecondsOfTheServersReturn() async throws {
        let server = try await FakeSyncServer.start(heartbeatInterval: 0.5)
        let phone = try SyncClient(server.configuration(user: "alice", databasePath: Self.path()))
        await phone.start()
        try await Self.until("the stream is live") { try await phone.status().live }
        server.setUnavailable(true)
        try await Self.until("the stream is down") { try await !phone.status().live }
        try await Task.sleep(for: .seconds(8))  // the stream's backoff: 0.5, 1, 2, 4 s…
        server.setUnavailable(false)
        await phone.networkAvailable()
        let back = Date()
        try server.upsert("recipes", id: "r9", data: ["title": "Soup", "minutes": 5], as: "alice")
        try await Self.until("the change from elsewhere shows") { try await phone.fetch(Recipe.self, id: "r9") != nil }
        #expect(Date().timeIntervalSince(back) < 2, "shown \(Date().timeIntervalSince(back)) s after the server's return")
        // The change may come by the poll before the stream is open again: the stream's
        // return is its own measure.
        try await Self.until("the stream is live again") { try await phone.status().live }
        #expect(Date().timeIntervalSince(back) < 2, "the stream was back \(Date().timeIntervalSince(back)) s after the server")
        await phone.stop()
        try await server.shutdown()
    }

    /// `sync(timeout:)` returns at its timeout against a server that accepts connections and
    /// never answers (each request has 30 s of its own), and a cancelled `sync()` throws
    /// `CancellationError`, not `syncFailed`.
    @Test func aSyncReturnsAtItsTimeoutAndACancelledOneSaysCancelled() async throws {
        let (listener, port) = try #require(Loopback.bind())
        defer { close(listener) }
        #expect(listen(listener, 16) == 0)
        let client = try SyncClient(ClientConfiguration(
            gatewayURL: URL(string: "http://127.0.0.1:\(port)")!, databasePath: Self.path(),
            deviceID: UUID().uuidString.lowercased(), tokenProvider: { _ in "token" }, pollInterval: nil))
        try await client.upsert("todos", id: "t1", data: ["title": "waits"])
        let started = Date()
        await #expect(throws: ClientError.self) { try await client.sync(timeout: 2) }
        let took = Date().timeIntervalSince(started)
        // At its timeout, not the request's 30 s (a loaded machine adds its own second or so).
        #expect(took < 10, "sync(timeout: 2) took \(took) s")
        let cancelled = Task { try await client.sync(timeout: 20) }
        try await Task.sleep(for: .milliseconds(300))
        cancelled.cancel()
        let outcome = await cancelled.result
        #expect(throws: CancellationError.self) { try outcome.get() }
        #expect(try await client.status().pendingOps == 1)
    }

    @Test func twoDevicesOfAUserSyncThroughItAndSeeEditsFromElsewhere() async throws {
        let server = try await FakeSyncServer.start()
        let phone = try SyncClient(server.configuration(user: "alice", databasePath: Self.path()))
        let laptop = try SyncClient(server.configuration(user: "alice", databasePath: Self.path()))
        await phone.start()
        await laptop.start()

        try await phone.save(Recipe(id: "r1", title: "Pancakes", minutes: 20))
        try await Self.until("the laptop shows the phone's recipe") {
            try await laptop.fetch(Recipe.self, id: "r1") == Recipe(id: "r1", title: "Pancakes", minutes: 20)
        }
        #expect(server.records(of: "alice", in: "recipes") == ["r1": ["title": "Pancakes", "minutes": 20]])
        try await Self.until("the phone has no edit left to sync") { try await phone.status().pendingOps == 0 }

        // Another device's edit, made on the server: both clients are poked and pull it.
        try server.upsert("recipes", id: "r2", data: ["title": "Stew", "minutes": 90], as: "alice")
        try await laptop.update(Recipe.self, id: "r1") { $0.minutes = 15 }
        for client in [phone, laptop] {
            try await Self.until("both recipes, as edited, on every device") {
                try await client.fetch(Recipe.self, where: Recipe.field(.minutes) <= 90, orderBy: [Recipe.field(.title).ascending])
                    == [Recipe(id: "r1", title: "Pancakes", minutes: 15), Recipe(id: "r2", title: "Stew", minutes: 90)]
            }
        }
        // The stream may still be (re)opening when the pull that converged ends.
        try await Self.until("the phone's live stream is open") { try await phone.status().live }
        // Another user sees none of it.
        #expect(server.records(of: "bob", in: "recipes").isEmpty)

        await phone.stop()
        await laptop.stop()
        try await server.shutdown()
    }

    struct Shelf: SyncRecord, Equatable {
        static let collection = "shelves"
        enum CodingKeys: String, CodingKey { case id, stock, tags }
        var id: String
        var stock: Int
        var tags: [String]
    }

    /// Counters and sets through the typed API: each device's increments show at once, add
    /// up on both devices, and count once however many pulls follow; an increment of text
    /// comes back rejected with its reason.
    @Test func incrementsAndTagsFromTwoDevicesAddUpOnBoth() async throws {
        let server = try await FakeSyncServer.start()
        let phone = try SyncClient(server.configuration(user: "alice", name: "phone"))
        let laptop = try SyncClient(server.configuration(user: "alice", name: "laptop"))
        let events = Events(laptop)
        try await phone.save(Shelf(id: "s1", stock: 10, tags: ["dry"]))
        try await server.waitUntilSynced(phone, laptop)
        for _ in 0..<3 {
            try await phone.increment(Shelf.self, id: "s1", \.stock, by: -1)
            try await laptop.increment(Shelf.self, id: "s1", .stock, by: 5)
        }
        #expect(try await phone.fetch(Shelf.self, id: "s1")?.stock == 7, "shown at once")
        try await phone.add(Shelf.self, id: "s1", \.tags, "quick")
        try await laptop.add(Shelf.self, id: "s1", \.tags, "cold", "quick")
        try await laptop.remove(Shelf.self, id: "s1", \.tags, "dry")
        try await server.waitUntilSynced(phone, laptop)
        try await server.waitUntilSynced(phone, laptop)
        for client in [phone, laptop] {
            let shelf = try await client.fetch(Shelf.self, id: "s1")
            #expect(shelf?.stock == 22)
            #expect(Set(shelf?.tags ?? []) == ["quick", "cold"])
        }
        #expect(server.records(of: "alice", in: "shelves")["s1"]?["stock"] == 22)

        try await laptop.patch("shelves", id: "s1", fields: ["label": "pantry"])
        try await laptop.increment("shelves", id: "s1", field: "label", by: 1)
        try await server.waitUntilSynced(laptop)
        try await Self.until("the increment of text is rejected") {
            events.all.contains { if case .rejected(_, "not_a_number") = $0 { true } else { false } }
        }
        #expect(try await laptop.record("shelves", id: "s1")?.data["label"] == "pantry")
        await #expect(throws: ClientError.self) { try await laptop.increment(Shelf.self, id: "missing", \.stock, by: 1) }
        await phone.stop()
        await laptop.stop()
        try await server.shutdown()
    }

    @Test func opsTheServerRefusesAreSetAsideOrRejected() async throws {
        let server = try await FakeSyncServer.start()
        server.refuse { op in
            switch op.id {
            case "invalid": return .invalid("title is too long for this app's server")
            case "rejected": return .rejected("not_allowed")
            default: return nil
            }
        }
        let client = try SyncClient(server.configuration(user: "alice", databasePath: Self.path()))
        let events = Events(client)
        await client.start()
        let setAside = try await client.save(Recipe(id: "invalid", title: "Soup", minutes: 5))
        let rejected = try await client.save(Recipe(id: "rejected", title: "Salad", minutes: 5))
        try await client.save(Recipe(id: "fine", title: "Bread", minutes: 60))

        try await Self.until("the server holds the fine recipe, and both refusals are reported") {
            events.all.contains(.setAside(opID: setAside, reason: "title is too long for this app's server"))
                && events.all.contains(.rejected(opID: rejected, reason: "not_allowed"))
                && server.records(of: "alice", in: "recipes").keys.sorted() == ["fine"]
        }
        #expect(try await client.setAside().map(\.opID) == [setAside])
        // The device tells the server what it set aside, once, for support to see.
        let device = try #require(await client.deviceID)
        try await Self.until("the set-aside op is reported") { server.setAsideReports(of: device)[setAside] != nil }
        #expect(server.setAsideReports(of: device) == [setAside: "title is too long for this app's server"])

        // Once the server takes it, a retry goes through.
        server.refuse(nil)
        try await client.retry(opID: setAside)
        try await Self.until("the retried recipe reaches the server") {
            server.records(of: "alice", in: "recipes")["invalid"] == ["title": "Soup", "minutes": 5]
        }
        await client.stop()
        try await server.shutdown()
    }

    @Test func editsWaitWhileTheServerIsUnreachable() async throws {
        let server = try await FakeSyncServer.start()
        let client = try SyncClient(server.configuration(user: "alice", databasePath: Self.path()))
        await client.start()
        try await Self.until("the device registered") { await client.deviceID != nil }
        server.setUnavailable(true)
        try await client.save(Recipe(id: "r1", title: "Pancakes", minutes: 20))
        try await Self.until("the status says why the edit waits") {
            let status = try await client.status()
            return status.pendingOps == 1 && status.lastError != nil
        }
        #expect(try await client.status().error == .serverError(status: 503), "the fake's outage answers 503")
        #expect(server.records(of: "alice", in: "recipes").isEmpty)

        server.setUnavailable(false)
        try await Self.until("the edit reaches the server once it answers again") {
            try await client.status().pendingOps == 0 && server.records(of: "alice", in: "recipes").count == 1
        }
        await client.stop()
        try await server.shutdown()
    }

    @Test func aSpaceDeletedBeforeItsEditsAppliedLosesThemAndIsGone() async throws {
        let server = try await FakeSyncServer.start()
        let kitchen = server.createSpace(name: "Kitchen", owner: "alice")
        try server.addMember("bob", to: kitchen)
        let client = try SyncClient(server.configuration(user: "bob", databasePath: Self.path(), spaceID: kitchen))
        let events = Events(client)
        await client.start()
        try await client.save(Recipe(id: "r1", title: "Pancakes", minutes: 20))
        try await Self.until("the first recipe is applied") { try await client.status().pendingOps == 0 }

        server.pauseJobs()  // a slow worker: the next push is taken, not applied
        let unapplied = try await client.save(Recipe(id: "r2", title: "Stew", minutes: 90))
        try await Self.until("the push is taken") { server.queuedJobs == 1 }
        server.deleteSpace(kitchen)
        server.resumeJobs()

        try await Self.until("the client reports the lost edit, then the space gone") {
            events.all.contains(.spaceGone(spaceID: kitchen))
        }
        let told = events.all.filter {
            if case .editsLost = $0 { return true }
            if case .spaceGone = $0 { return true }
            return false
        }
        #expect(told == [.editsLost(spaceID: kitchen, opIDs: [unapplied]), .spaceGone(spaceID: kitchen)])
        #expect(try await client.fetch(Recipe.self).isEmpty, "the space's records went with it")
        await client.stop()
        try await server.shutdown()
    }
}
