import Foundation
import SyncModels
import SynclineClient
import Testing
import TestSupport

/// SynclineClient with shared spaces against the real stack: a family's shopping list.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct ClientSpaceTests {
    /// The owner's personal client makes the space and invites the others, who accept with
    /// theirs; returns the space and the three personal clients.
    static func family(_ stack: any TestStack, fanout: Int?) async throws -> (space: String, users: [String], personal: [ClientTests.Device]) {
        let users = ["alice", "bob", "carol"].map { "\($0)-\(UUID().uuidString.prefix(6))" }
        let personal = try users.map { try ClientTests.device(stack, user: $0, fanout: fanout) }
        let created = try await personal[0].client.createSpace(name: "Family")
        #expect(created.role == .owner && !created.personal)
        for guest in personal.dropFirst() {
            let invitation = try await personal[0].client.invite(to: created.spaceID, as: .editor, expiresIn: 3600)
            let joined = try await guest.client.acceptInvitation(invitation.code)
            #expect(joined == JoinedSpace(spaceID: created.spaceID, role: .editor))
        }
        // An invitation made and revoked through the client: listed without its code, then gone.
        let spare = try await personal[0].client.invite(to: created.spaceID, as: .viewer)
        let open = try await personal[0].client.invitations(in: created.spaceID)
        #expect(open.map(\.invitationID) == [spare.invitationID] && open.first?.role == .viewer)
        try await personal[0].client.revokeInvitation(spare.invitationID, in: created.spaceID)
        #expect(try await personal[0].client.invitations(in: created.spaceID).isEmpty)
        let members = try await personal[1].client.members(of: created.spaceID)
        #expect(Set(members.map(\.userID)) == Set(users))
        let listed = try await personal[2].client.spaces()
        #expect(listed.first?.personal == true && listed.contains { $0.spaceID == created.spaceID && $0.role == .editor })
        return (created.spaceID, users, personal)
    }

    /// Three users with two devices each edit one shopping list at once, each device's clock
    /// off in its own way, one device offline throughout; once all have synced, every
    /// device shows exactly what the server holds — and a device that stayed live saw the
    /// last change through the stream, without asking.
    @Test func aFamilyOfThreeWithTwoDevicesEachConverges() async throws {
        try await InProcessStack.with(workers: 2, fanouts: 1) { stack in
            let fanout = stack.fanoutPorts[0]
            let (space, users, personal) = try await Self.family(stack, fanout: fanout)
            let directory = E2E.environment["SYNCLINE_TEST_OUTPUT"] ?? NSTemporaryDirectory()
            let offsets: [Double] = [0, -900, 30, 120, -45, 600]  // seconds of clock drift per device
            var devices: [ClientTests.Device] = []
            for (index, user) in users.enumerated() {
                // The first device of each user is their personal client's sibling (same device
                // id); the second a device of its own.
                let path = "\(directory)/space-\(UUID().uuidString.prefix(8)).sqlite"
                let sibling = try await personal[index].client.client(for: space, databasePath: path)
                #expect(await sibling.deviceID == personal[index].client.deviceID)
                let log = ClientTests.EventLog()
                devices.append(ClientTests.Device(
                    client: sibling, path: path, log: log, collector: Task { for await event in sibling.events { await log.append(event) } }))
                devices.append(try ClientTests.device(
                    stack, user: user, fanout: fanout, clockOffset: offsets[index * 2 + 1], space: space))
            }
            let offline = 5  // carol's second device
            for (index, device) in devices.enumerated() where index != offline { await device.client.start() }

            let items = ["milk", "eggs", "bread", "apples", "rice"]
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (index, device) in devices.enumerated() {
                    group.addTask {
                        var rng = SplitMix64(state: UInt64(index + 1) &* 7_919)
                        for round in 0..<12 {
                            let item = items.randomElement(using: &rng)!
                            switch Int.random(in: 0..<6, using: &rng) {
                            case 0..<3:
                                try await device.client.patch("items", id: item, fields: [
                                    "qty": .int(Int64(round + 1)), "by\(index)": true,
                                ])
                            case 3, 4:
                                try await device.client.upsert("items", id: item, data: ["name": .string(item), "done": .bool(round % 2 == 0)])
                            default:
                                try await device.client.delete("items", id: item)
                            }
                            try await Task.sleep(for: .milliseconds(Int.random(in: 5...60, using: &rng)))
                        }
                    }
                }
                try await group.waitForAll()
            }
            #expect(try await devices[offline].client.status().pendingOps > 0, "the offline device's edits wait")
            for device in devices { try await device.client.sync() }
            for device in devices { try await device.client.sync() }

            let server = try await ClientTests.server(stack, users[0], "items", space: space)
            for (index, device) in devices.enumerated() {
                #expect(try await ClientTests.shown(device.client, "items") == server, "device \(index)")
                #expect(try await device.client.status().pendingOps == 0, "device \(index)")
            }
            // Nothing leaked into anyone's personal space.
            for device in personal { #expect(try await ClientTests.shown(device.client, "items").isEmpty) }

            // Live: bob's second device shows alice's next change through the stream.
            _ = try await eventually(within: 10, "bob's stream") { try await devices[3].client.status().live ? true : nil }
            try await devices[0].client.upsert("items", id: "cheese", data: ["name": "cheese"])
            _ = try await eventually(within: 5, "bob's second device shows cheese") {
                try await devices[3].client.record("items", id: "cheese") != nil ? true : nil
            }
            for device in devices { await device.client.stop() }
        }
    }

    /// Edits a removed member made and never got applied are lost with the space, and the
    /// app hears which ones.
    @Test func aRemovedMembersUnsyncedEditsAreReportedLost() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let (space, users, personal) = try await Self.family(stack, fanout: stack.fanoutPorts.first)
            let guest = try ClientTests.device(stack, user: users[1], space: space)
            try await guest.client.sync()
            let opID = try await guest.client.upsert("items", id: "eggs", data: ["name": "eggs"])  // offline: never sent
            try await personal[0].client.removeMember(users[1], from: space)
            await #expect(throws: ClientError.spaceGone) { try await guest.client.sync() }
            let events = try await eventually(within: 5, "the guest's events") {
                await guest.log.events.contains(.spaceGone(spaceID: space)) ? await guest.log.events : nil
            }
            let lost = events.firstIndex(of: .editsLost(spaceID: space, opIDs: [opID]))
            let gone = events.firstIndex(of: .spaceGone(spaceID: space))
            #expect(lost != nil && gone != nil && lost! < gone!, "\(events)")
        }
    }

    /// A member removed from a space: their running client hears it (the stream narrowed to
    /// the space ends, the pull answers 404), drops the space's local data and stops;
    /// writes are refused from then on. A store belongs to one space.
    @Test func aSpaceTheUserWasRemovedFromIsDroppedLocally() async throws {
        try await InProcessStack.with(workers: 1, fanouts: 1) { stack in
            let (space, users, personal) = try await Self.family(stack, fanout: stack.fanoutPorts[0])
            let owner = try ClientTests.device(stack, user: users[0], space: space)
            let guest = try ClientTests.device(stack, user: users[1], fanout: stack.fanoutPorts[0], space: space)
            try await owner.client.upsert("items", id: "milk", data: ["name": "milk"])
            try await owner.client.sync()
            try await guest.client.sync()
            #expect(try await guest.client.record("items", id: "milk") != nil)
            await guest.client.start()
            _ = try await eventually(within: 10, "the guest's stream") { try await guest.client.status().live ? true : nil }
            try await guest.client.patch("items", id: "milk", fields: ["qty": 2])  // may or may not reach the server first

            try await personal[0].client.removeMember(users[1], from: space)
            _ = try await eventually(within: 10, "the guest's client drops the space") {
                await guest.log.events.contains(.spaceGone(spaceID: space)) ? true : nil
            }
            #expect(try await guest.client.records("items").isEmpty)
            #expect(try await guest.client.status().pendingOps == 0)
            await #expect(throws: ClientError.spaceGone) { try await guest.client.upsert("items", id: "x", data: [:]) }
            await #expect(throws: ClientError.spaceGone) { try await guest.client.sync() }
            await guest.client.stop()

            // The same file opened for another space, or the personal one, is refused.
            #expect(throws: ClientError.otherSpace(held: space)) {
                try SyncClient(ClientConfiguration(
                    gatewayURL: URL(string: stack.client.base)!, databasePath: guest.path, tokenProvider: { _ in "" }))
            }
            // The owner's data is untouched.
            try await owner.client.sync()
            #expect(try await owner.client.record("items", id: "milk") != nil)
        }
    }

    /// A viewer's edits are refused by the server: set aside for the app, never retried in
    /// a loop.
    @Test func aViewersEditsAreSetAside() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let owner = try ClientTests.device(stack, user: ClientTests.user())
            let viewerUser = ClientTests.user()
            let viewerPersonal = try ClientTests.device(stack, user: viewerUser)
            let space = try await owner.client.createSpace(name: "Guides").spaceID
            let code = try await owner.client.invite(to: space, as: .viewer).code
            #expect(try await viewerPersonal.client.acceptInvitation(code).role == .viewer)
            let viewer = try ClientTests.device(stack, user: viewerUser, space: space)
            try await viewer.client.upsert("guides", id: "g1", data: ["title": "mine"])
            try await viewer.client.sync()
            #expect(try await viewer.client.setAside().map(\.id) == ["g1"])
            #expect(try await viewer.client.status().pendingOps == 0)
            // The device told the server what it set aside and how far it pulled: support sees both.
            let deviceID = try #require(await viewer.client.deviceID)
            let admin = await E2E.token("support-\(viewerUser)", admin: true)
            try await eventually(within: 10, "the report and the pull reach the support console") { () -> Bool? in
                let view = try await stack.client.request("GET", "/v1/admin/support/devices/\(deviceID)", token: admin).json
                let reported = (view["set_aside_ops"] as? [[String: Any]])?.first
                let pulled = (view["pulls"] as? [[String: Any]])?.contains { $0["space_id"] as? String == space } == true
                return reported?["id"] as? String == "g1" && reported?["collection"] as? String == "guides" && pulled ? true : nil
            }
            // The refused edit keeps showing, marked, until the app drops it.
            let shown = try await viewer.client.record("guides", id: "g1")
            guard case .setAside? = shown?.syncState else {
                Issue.record("the set-aside edit does not show as such: \(String(describing: shown))")
                return
            }
            #expect(shown?.data == ["title": "mine"])
            let opID = try #require(try await viewer.client.setAside().first?.opID)
            try await viewer.client.drop(opID: opID)
            #expect(try await viewer.client.record("guides", id: "g1") == nil, "dropped: the server's state (none) shows")
            #expect(try await ClientTests.server(stack, viewerUser, "guides", space: space).isEmpty)
        }
    }

    /// A space's client made before the device ever reached the server shares the device's
    /// registration: once online, both clients push as one device, and the user has one.
    @Test func clientsOfOneDeviceShareItsRegistrationEvenWhenMadeOffline() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let user = ClientTests.user()
            let token = await E2E.token(user)
            let created = try await stack.client.json("POST", "/v1/spaces", token: token, ["name": "Crew"])
            let space = try #require(created.json["space_id"] as? String)
            let network = OfflineSwitch()
            let directory = E2E.environment["SYNCLINE_TEST_OUTPUT"] ?? NSTemporaryDirectory()
            let parent = try SyncClient(ClientConfiguration(
                gatewayURL: URL(string: stack.client.base)!, databasePath: "\(directory)/shared-reg-\(UUID().uuidString.prefix(8)).sqlite",
                tokenProvider: { _ in try network.token(token) }, pollInterval: nil))
            let child = try await parent.client(for: space, databasePath: "\(directory)/shared-reg-child-\(UUID().uuidString.prefix(8)).sqlite")
            try await parent.upsert("todos", id: "mine", data: ["n": 1])
            try await child.upsert("lists", id: "ours", data: ["n": 2])
            network.goOnline()
            async let parentSynced: Void = parent.sync()
            async let childSynced: Void = child.sync()
            _ = try await (parentSynced, childSynced)
            let parentDevice = await parent.deviceID, childDevice = await child.deviceID
            #expect(parentDevice != nil && parentDevice == childDevice, "\(parentDevice ?? "-") vs \(childDevice ?? "-")")
            let devices = try await stack.client.request("GET", "/v1/devices", token: token).json["items"] as? [Any]
            #expect(devices?.count == 1, "the user has \(devices?.count ?? 0) devices")
        }
    }
}

/// A token provider that fails until the test says the network is back.
final class OfflineSwitch: @unchecked Sendable {
    // @unchecked: `online` is only read and written under `lock`.
    private let lock = NSLock()
    private var online = false

    struct Offline: Error {}

    func goOnline() { lock.withLock { online = true } }

    func token(_ token: String) throws -> String {
        try lock.withLock {
            guard online else { throw Offline() }
            return token
        }
    }
}
