import Foundation
import SyncModels
import SynclineClient
import Testing
import TestSupport

/// SynclineClient's attachments against the real stack: a file attached offline travels
/// after a restart, before the record that references it; a refused file blocks nothing.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct ClientAttachmentTests {
    static func photo(_ count: Int) -> Data { Data((0..<count).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 9) }) }

    @Test func aPhotoAttachedOfflineArrivesWithItsFileAfterARestart() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let user = ClientTests.user()
            let directory = E2E.environment["SYNCLINE_TEST_OUTPUT"] ?? NSTemporaryDirectory()
            let path = "\(directory)/attach-\(UUID().uuidString.prefix(8)).sqlite"
            // Offline: the gateway's address answers nothing.
            let offline = try SyncClient(ClientConfiguration(
                gatewayURL: URL(string: "http://127.0.0.1:9")!, databasePath: path, tokenProvider: { _ in await E2E.token(user) },
                pollInterval: nil))
            let photo = Self.photo(5 * 1024 * 1024 + 321)
            let ref = try await offline.attach(data: photo, contentType: "image/jpeg")
            try await offline.upsert("recipes", id: "r1", data: ["title": "Soup", "photo": ref.json])
            let waiting = try await offline.status()
            #expect(waiting.pendingUploads == 1 && waiting.pendingUploadBytes == Int64(photo.count) && waiting.pendingOps == 1)
            #expect(try await offline.blob(ref) == URL(fileURLWithPath: path + ".blobs/\(ref.sha256)"), "its own file, at once")

            // The app restarts, online.
            let phone = try ClientTests.device(stack, user: user, path: path)
            await phone.client.start()
            try await phone.client.sync()
            let synced = try await phone.client.status()
            #expect(synced.pendingUploads == 0 && synced.pendingOps == 0)
            let progress = await phone.log.events.compactMap { event -> Int64? in
                if case .uploadProgress(_, let sent, _) = event { return sent }
                return nil
            }
            #expect(progress.contains(4 * 1024 * 1024), "sent with tus, in pieces: \(progress)")

            // The other device gets the record, and the file with it.
            let laptop = try ClientTests.device(stack, user: user)
            try await laptop.client.sync()
            let record = try #require(try await laptop.client.record("recipes", id: "r1"))
            let pulled = try #require(record.data["photo"].flatMap(BlobRef.init(json:)))
            #expect(pulled == ref)
            let file = try await laptop.client.blob(pulled)
            #expect(try Data(contentsOf: file) == photo)
            await phone.client.stop()
        }
    }

    /// A piece of a resumable upload that reached the server though its answer was lost,
    /// sent again, meets a 409: the client asks `HEAD` where the upload stands and goes on
    /// from there — not from byte 0 (before: the upload was dropped and begun again).
    @Test func anUploadThatMeetsA409AsksWhereItStandsAndGoesOn() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let proxy = try SwallowingProxy(target: stack.client.base)
            proxy.passThrough()
            defer { proxy.close() }
            let user = ClientTests.user()
            let directory = E2E.environment["SYNCLINE_TEST_OUTPUT"] ?? NSTemporaryDirectory()
            let client = try SyncClient(ClientConfiguration(
                gatewayURL: URL(string: "http://127.0.0.1:\(proxy.port)")!, databasePath: "\(directory)/resume-\(UUID().uuidString.prefix(8)).sqlite",
                tokenProvider: { _ in await E2E.token(user) }, pollInterval: nil))
            let video = Self.photo(10 * 1024 * 1024 + 17)  // three pieces: 4, 4 and 2 MiB
            let ref = try await client.attach(data: video, contentType: "video/mp4")
            try await client.upsert("clips", id: "c1", data: ["video": ref.json])
            proxy.repeatNext("PATCH", after: 1)  // the second piece arrives twice: the second time, 409
            try await client.sync(timeout: 60)

            let uploads = proxy.exchanges.filter { $0.path.hasPrefix("/v1/uploads") }.map { "\($0.method) \($0.status)" }
            #expect(uploads == ["POST 201", "PATCH 204", "PATCH 409", "HEAD 200", "PATCH 204"], "\(uploads)")
            #expect(try await client.status().pendingUploads == 0)
            let laptop = try ClientTests.device(stack, user: user)
            try await laptop.client.sync()
            let pulled = try #require(try await laptop.client.record("clips", id: "c1")?.data["video"].flatMap(BlobRef.init(json:)))
            #expect(try Data(contentsOf: try await laptop.client.blob(pulled)) == video)
        }
    }

    struct Recipe: SyncRecord, Equatable {
        static let collection = "recipes"
        var id: String
        var title: String
        var photo: BlobRef?
        var cookedAt: Date
    }

    /// A typed record's `BlobRef` property is a file reference: its op waits for the
    /// upload, the server holds the reference and the file, and another device reads the
    /// record back typed, with the file and the date to the millisecond.
    @Test func aTypedRecordsFileTravelsAsAReferenceAndComesBackTyped() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let user = ClientTests.user()
            let phone = try ClientTests.device(stack, user: user)
            let photo = Self.photo(300_000)
            let recipe = Recipe(
                id: "r1", title: "Soup", photo: try await phone.client.attach(data: photo, contentType: "image/jpeg"),
                cookedAt: Date(timeIntervalSince1970: 1_795_338_000.123))
            try await phone.client.save(recipe)
            try await phone.client.sync()
            #expect(try await phone.client.status().pendingUploads == 0)
            let stored = try #require(try await ClientTests.server(stack, user, "recipes")["r1"])
            #expect(stored["photo"].flatMap(BlobRef.init(json:)) == recipe.photo, "the server holds a reference: \(stored)")
            #expect(stored["cookedAt"] == "2026-11-22T09:00:00.123Z")

            let laptop = try ClientTests.device(stack, user: user)
            try await laptop.client.sync()
            let pulled = try #require(try await laptop.client.fetch(Recipe.self, id: "r1"))
            #expect(pulled == recipe)
            #expect(try Data(contentsOf: try await laptop.client.blob(try #require(pulled.photo))) == photo)
        }
    }

    @Test func aFileTheServerRefusesSetsAsideItsOpsAndBlocksNothing() async throws {
        try await InProcessStack.with(workers: 1, environment: ["BLOB_MAX_BYTES": "1MiB"]) { stack in
            let user = ClientTests.user()
            let phone = try ClientTests.device(stack, user: user)
            let large = Self.photo(2 * 1024 * 1024)
            let ref = try await phone.client.attach(data: large, contentType: "image/png")
            let refusedOp = try await phone.client.upsert("recipes", id: "big", data: ["photo": ref.json])
            try await phone.client.upsert("recipes", id: "later", data: ["title": "Bread"])
            try await phone.client.sync()
            #expect(try await ClientTests.server(stack, user, "recipes") == ["later": ["title": "Bread"]])
            let aside = try await phone.client.setAside()
            #expect(aside.map(\.opID) == [refusedOp] && aside.first?.reason.contains("at most") == true, "\(aside)")
            #expect(await phone.log.events.contains(.uploadRefused(sha256: ref.sha256, reason: aside.first?.reason ?? "")))
            #expect(try await phone.client.status().pendingUploads == 0)
        }
    }
}
