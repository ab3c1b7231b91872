import HTTPSupport
import NIOCore
import NIOEmbedded
import Testing

/// Connections held at once: per client address and in total, given back when they close.
struct ConnectionLimitsTests {
    @Test func oneAddressHoldsAtMostItsShareAndOthersAreStillAdmitted() {
        let counter = ConnectionCounter(limits: ConnectionLimits(total: 10, perAddress: 3))
        #expect((0..<3).allSatisfy { _ in counter.admit("198.51.100.7") })
        #expect(!counter.admit("198.51.100.7"))
        #expect(counter.admit("203.0.113.9"))
        counter.release("198.51.100.7")
        #expect(counter.admit("198.51.100.7"))
        #expect(counter.total == 4)
    }

    @Test func theTotalIsHeldWhateverTheAddresses() {
        let counter = ConnectionCounter(limits: ConnectionLimits(total: 4, perAddress: 100))
        #expect((0..<4).allSatisfy { counter.admit("192.0.2.\($0)") })
        #expect(!counter.admit("192.0.2.200"))
        counter.release("192.0.2.1")
        #expect(counter.admit("192.0.2.200"))
    }

    @Test func theDefaultTotalLeavesDescriptorsForEverythingElse() {
        #expect(ConnectionLimits.defaultTotal(descriptorLimit: 1_048_576) == 1_048_576 - ConnectionLimits.reservedDescriptors)
        #expect(ConnectionLimits.defaultTotal(descriptorLimit: 20_000) == 20_000 - ConnectionLimits.reservedDescriptors)
        #expect(ConnectionLimits.defaultTotal(descriptorLimit: 256) == 64)
    }

    /// On a channel: one beyond the limit is closed as it becomes active, and a closed one
    /// gives its place back.
    @Test func aConnectionBeyondTheLimitIsClosedAndAClosedOneGivesItsPlaceBack() throws {
        let counter = ConnectionCounter(limits: ConnectionLimits(total: 100, perAddress: 1))
        let address = try SocketAddress(ipAddress: "198.51.100.7", port: 40000)
        func connect() throws -> EmbeddedChannel {
            let channel = EmbeddedChannel(handler: ConnectionLimitHandler(counter: counter))
            try channel.connect(to: address).wait()
            return channel
        }
        let first = try connect()
        #expect(first.isActive)
        let second = try connect()
        #expect(!second.isActive, "beyond the address's limit")
        _ = try first.finish()
        let third = try connect()
        #expect(third.isActive && counter.total == 1)
        _ = try third.finish()
        #expect(counter.total == 0)
    }
}
