import Foundation
import SynclineClient
import SynclineTesting
import Testing

/// What an app's tests make happen through the fake server without a polling loop: stores
/// in memory, one device offline, tokens that expire or are refused, rate limits, dead
/// jobs, invitations and files over 4 MiB.
@Suite("The fake server's scenarios", .timeLimit(.minutes(1)))
struct FakeSyncServerScenarioTests {
    struct Recipe: SyncRecord, Equatable {
        static let collection = "recipes"
        var id: String
        var title: String
        var photo: BlobRef? = nil
    }

    @Test func twoDevicesInMemoryAreSyncedByOneCall() async throws {
        let server = try await FakeSyncServer.start()
        let phone = try SyncClient(server.configuration(user: "alice"))
        let laptop = try SyncClient(server.configuration(user: "alice"))
        try await phone.save(Recipe(id: "r1", title: "Pancakes"))
        try await laptop.save(Recipe(id: "r2", title: "Stew"))
        try await server.waitUntilSynced(phone, laptop)
        for client in [phone, laptop] {
            #expect(try await client.fetch(Recipe.self, orderBy: [Field.id.ascending]).map(\.title) == ["Pancakes", "Stew"])
            #expect(try await client.status().pendingOps == 0)
        }
        try await server.shutdown()
    }

    /// One device loses the network: its edits wait and its status says offline, the other
    /// device syncs on; back online, everything meets.
    @Test func oneDeviceOfflineWaitsWhileTheOtherSyncs() async throws {
        let server = try await FakeSyncServer.start()
        let phone = try SyncClient(server.configuration(user: "alice", name: "phone"))
        let laptop = try SyncClient(server.configuration(user: "alice", name: "laptop"))
        try await server.waitUntilSynced(phone, laptop)
        try server.setOffline("phone", true)
        try await phone.save(Recipe(id: "r1", title: "Written offline"))
        try await laptop.save(Recipe(id: "r2", title: "Written online"))
        await #expect(throws: ClientError.self) { try await phone.sync(timeout: 5) }
        let offline = try await phone.status()
        #expect(offline.error == .offline, "\(String(describing: offline.lastError))")
        try await laptop.sync()
        #expect(server.records(of: "alice", in: "recipes").keys.sorted() == ["r2"])

        try server.setOffline("phone", false)
        try await server.waitUntilSynced(phone, laptop)
        #expect(try await laptop.fetch(Recipe.self).count == 2)
        #expect(try await phone.status().error == nil)
        try await server.shutdown()
    }

    /// An expired token is refreshed without the app noticing; a user the server signed
    /// out shows as `.signInRequired`, not as offline.
    @Test func anExpiredTokenIsRefreshedAndASignedOutUserIsTold() async throws {
        let server = try await FakeSyncServer.start()
        let phone = try SyncClient(server.configuration(user: "alice"))
        try await phone.sync()
        server.expireTokens(of: "alice")
        try await phone.save(Recipe(id: "r1", title: "Pancakes"))
        try await phone.sync()
        #expect(server.tokenRefreshes(of: "alice") == 1)
        #expect(server.records(of: "alice", in: "recipes").count == 1)

        server.setSignedOut("alice", true)
        try await phone.save(Recipe(id: "r2", title: "Stew"))
        await #expect(throws: ClientError.self) { try await phone.sync() }
        #expect(try await phone.status().error == .signInRequired)
        server.setSignedOut("alice", false)
        try await phone.sync()
        #expect(try await phone.status().error == nil)
        try await server.shutdown()
    }

    @Test func aRateLimitIsToldWithItsRetryAfter() async throws {
        let server = try await FakeSyncServer.start()
        let phone = try SyncClient(server.configuration(user: "alice"))
        try await phone.sync()
        try await phone.save(Recipe(id: "r1", title: "Pancakes"))
        server.rateLimit(next: 1, retryAfter: 7)
        await #expect(throws: ClientError.syncFailed(reason: "push answered 429: Too many requests (the test made it so).", retryAfter: 7)) {
            try await phone.sync()
        }
        #expect(try await phone.status().error == .rateLimited(retryAfter: 7))
        try await phone.sync()
        #expect(server.records(of: "alice", in: "recipes").count == 1)
        try await server.shutdown()
    }

    /// A dead-lettered job: its ops are set aside on the device, with the event, and a
    /// retry once the cause is gone goes through.
    @Test func aDeadJobsOpsAreSetAside() async throws {
        let server = try await FakeSyncServer.start()
        server.deadLetterJobs { ops in ops.contains { $0.id == "poison" } ? "the worker gave up" : nil }
        let phone = try SyncClient(server.configuration(user: "alice"))
        let events = phone.events
        let poison = try await phone.save(Recipe(id: "poison", title: "Fugu"))
        try await phone.sync()
        #expect(try await phone.setAside().map(\.opID) == [poison])
        for await event in events {
            if case .jobDead(_, let opIDs) = event {
                #expect(opIDs == [poison])
                break
            }
        }
        server.deadLetterJobs(nil)
        try await phone.retry(opID: poison)
        try await phone.sync()
        #expect(server.records(of: "alice", in: "recipes")["poison"] == ["title": "Fugu"])
        try await server.shutdown()
    }

    /// An owner invites, the invited user accepts and syncs the space's records.
    @Test func anInvitationIsAcceptedAndTheSpaceSyncs() async throws {
        let server = try await FakeSyncServer.start()
        let alice = try SyncClient(server.configuration(user: "alice"))
        let kitchen = try await alice.createSpace(name: "Kitchen")
        let alicesKitchen = try SyncClient(server.configuration(user: "alice", spaceID: kitchen.spaceID))
        try await alicesKitchen.save(Recipe(id: "r1", title: "Soup"))
        let invitation = try await alicesKitchen.invite(to: kitchen.spaceID, as: .editor)

        let bob = try SyncClient(server.configuration(user: "bob"))
        let joined = try await bob.acceptInvitation(invitation.code)
        #expect(joined == JoinedSpace(spaceID: kitchen.spaceID, role: .editor))
        await #expect(throws: ClientError.self) { try await bob.acceptInvitation(invitation.code) }
        let bobsKitchen = try SyncClient(server.configuration(user: "bob", spaceID: joined.spaceID))
        try await server.waitUntilSynced(alicesKitchen, bobsKitchen)
        #expect(try await bobsKitchen.fetch(Recipe.self).map(\.title) == ["Soup"])
        #expect(try await bob.members(of: kitchen.spaceID).map(\.userID) == ["alice", "bob"])
        try await server.shutdown()
    }

    /// A file over 4 MiB goes by tus in pieces and reaches the other device whole.
    @Test func aFileOverFourMebibytesGoesInPieces() async throws {
        let server = try await FakeSyncServer.start()
        let phone = try SyncClient(server.configuration(user: "alice"))
        let laptop = try SyncClient(server.configuration(user: "alice"))
        // 9 MiB whose every 4 KiB differs (made without a closure per byte: a debug build
        // would spend seconds of a cooperative thread on it, holding up the other tests).
        var video = Data(count: 9 << 20)
        video.withUnsafeMutableBytes { bytes in
            for page in stride(from: 0, to: bytes.count, by: 4096) { bytes[page] = UInt8(truncatingIfNeeded: page >> 12) }
        }
        let photo = try await phone.attach(data: video, contentType: "video/mp4")
        try await phone.save(Recipe(id: "r1", title: "Soufflé", photo: photo))
        try await server.waitUntilSynced(phone, laptop)
        let shown = try #require(try await laptop.fetch(Recipe.self, id: "r1")?.photo)
        #expect(try Data(contentsOf: try await laptop.blob(shown)) == video)
        try await server.shutdown()
    }
}
