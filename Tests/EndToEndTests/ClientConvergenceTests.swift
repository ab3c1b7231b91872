import Foundation
import SyncModels
import SynclineClient
import Testing
import TestSupport

/// Property: three devices of one user with drifting clocks write random ops, sync at
/// random moments, are restarted (a new client on the same SQLite file) and lose the
/// gateway for a while; once all of them have synced, every local store equals the server.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct ClientConvergenceTests {
    @Test(arguments: [1, 2])
    func randomOpsRestartsAndOutagesConverge(seed: Int) async throws {
        try await Stack.with(workers: 2) { stack in
            var rng = SplitMix64(state: UInt64(seed) &* 104_729)
            let user = ClientTests.user()
            let offsets: [Double] = [0, -600, 45]  // seconds: one device ten minutes behind, one ahead
            var devices = try offsets.map { try ClientTests.device(stack, user: user, clockOffset: $0) }
            let ids = ["a", "b", "c", "d", "e"]
            let fields = ["title", "done", "n", "tags"]
            let values: [JSONValue] = ["x", "y", true, false, 1, 2, ["t1", "t2"], .null]
            var gatewayDown = false
            var written = 0, restarts = 0, outages = 0

            for round in 0..<40 {
                // The gateway is down for rounds 12 to 21: writes queue, syncs fail.
                if round == 12 || round == 22 {
                    if gatewayDown { try await stack.replaceGateway() } else { stack.gateway.stop() }
                    outages += gatewayDown ? 0 : 1
                    gatewayDown.toggle()
                }
                let index = Int.random(in: 0..<devices.count, using: &rng)
                let client = devices[index].client
                switch Int.random(in: 0..<19, using: &rng) {
                case 0..<12:
                    for _ in 0..<Int.random(in: 1...3, using: &rng) {
                        let id = ids.randomElement(using: &rng)!
                        var data: [String: JSONValue] = [:]
                        for field in fields where Bool.random(using: &rng) { data[field] = values.randomElement(using: &rng)! }
                        written += 1
                        switch Int.random(in: 0..<10, using: &rng) {
                        case 0..<4: try await client.upsert("todos", id: id, data: data)
                        case 4..<8: try await client.patch("todos", id: id, fields: data.isEmpty ? ["n": 3] : data)
                        default: try await client.delete("todos", id: id)
                        }
                    }
                case 12..<17:
                    if gatewayDown {
                        await #expect(throws: (any Error).self) { try await client.sync(timeout: 1) }
                    } else {
                        try await client.sync()
                    }
                default:
                    restarts += 1
                    devices[index].collector.cancel()
                    devices[index] = try ClientTests.device(
                        stack, user: user, path: devices[index].path, clockOffset: offsets[index])
                }
            }
            #expect(written > 20 && restarts > 0 && outages > 0, "seed \(seed): \(written) ops, \(restarts) restarts, \(outages) outages")
            if gatewayDown { try await stack.replaceGateway() }
            for _ in 0..<2 {
                for device in devices { try await device.client.sync() }
            }
            let server = try await ClientTests.server(stack, user)
            #expect(!server.isEmpty)
            for (index, device) in devices.enumerated() {
                let shown = try await ClientTests.shown(device.client)
                #expect(shown == server, "seed \(seed), device \(index): \(shown) vs server \(server)")
                #expect(try await device.client.status().pendingOps == 0)
            }
        }
    }
}
