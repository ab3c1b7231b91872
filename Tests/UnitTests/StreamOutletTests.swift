import Foundation
import NIOCore
import NIOEmbedded
import NIOHTTPTypes
import NIOWebSocket
import SyncModels
import Testing

@testable import Fanout

/// A stream's outlet on a channel of its own: what waits for `hello`, the framing, and a
/// client too slow to read.
struct StreamOutletTests {
    /// The handler whose context the outlet writes through, as a stream's handler does.
    final class Owner: ChannelInboundHandler {
        typealias InboundIn = Never
        var context: ChannelHandlerContext?
        func handlerAdded(context: ChannelHandlerContext) { self.context = context }
    }

    static func channel() throws -> (EmbeddedChannel, ChannelHandlerContext) {
        let owner = Owner()
        let channel = EmbeddedChannel(handler: owner)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        return (channel, try #require(owner.context))
    }

    static func events(_ channel: EmbeddedChannel) throws -> [String] {
        var events: [String] = []
        while let part = try channel.readOutbound(as: HTTPResponsePart.self) {
            guard case .body(let buffer) = part else { continue }
            events.append(String(buffer: buffer))
        }
        return events
    }

    /// Stands for the stream's `hello` (whose cursors come from the database).
    static let hello = StreamMessage.poke(cursor: "7", space: SpaceID(UUID(uuidString: "00000000-0000-4000-8000-000000000001")!))

    @Test func whatTheHubSendsBeforeTheStartFollowsTheHelloTheNewest64() throws {
        let (channel, context) = try Self.channel()
        let outlet = StreamOutlet(framing: .serverSentEvents)
        for cursor in 1...70 { outlet.send(.poke(cursor: String(cursor))) }
        #expect(try Self.events(channel).isEmpty, "nothing goes out before the hello")
        outlet.start(context: context, hello: Self.hello)
        let events = try Self.events(channel)
        #expect(events.count == 65)
        #expect(events.first == "data: \(Self.hello.json)\n\n")
        #expect(events.dropFirst().map { $0 } == (7...70).map { "data: \(StreamMessage.poke(cursor: String($0)).json)\n\n" })
        outlet.send(.heartbeat)
        #expect(try Self.events(channel) == ["data: {\"type\":\"heartbeat\"}\n\n"])
        #expect(outlet.bytes == (events + ["data: {\"type\":\"heartbeat\"}\n\n"]).reduce(0) { $0 + $1.utf8.count })
    }

    @Test func aClientThatStopsReadingIsDisconnected() throws {
        let (channel, context) = try Self.channel()
        let outlet = StreamOutlet(framing: .serverSentEvents)
        outlet.start(context: context, hello: Self.hello)
        _ = try Self.events(channel)
        channel.isWritable = false  // its outgoing buffer is past the high-water mark
        outlet.send(.poke(cursor: "8"))
        #expect(try Self.events(channel).isEmpty)
        #expect(!channel.isActive, "the stream is closed; its client reconnects and says hello again")
    }

    @Test func aStreamTheHubEndedBeforeItStartedClosesAtItsStart() throws {
        let (channel, context) = try Self.channel()
        let outlet = StreamOutlet(framing: .serverSentEvents)
        outlet.finish()
        outlet.start(context: context, hello: Self.hello)
        #expect(try Self.events(channel).isEmpty && !channel.isActive)
    }

    @Test func theEndOfAStreamEndsItsResponseOrSendsANormalClose() throws {
        let (sse, sseContext) = try Self.channel()
        let events = StreamOutlet(framing: .serverSentEvents)
        events.start(context: sseContext, hello: Self.hello)
        events.finish()
        events.send(.heartbeat)
        var parts: [HTTPResponsePart] = []
        while let part = try sse.readOutbound(as: HTTPResponsePart.self) { parts.append(part) }
        #expect(parts.count == 2 && parts.last == .end(nil))
        #expect(!sse.isActive)

        let (webSocket, webSocketContext) = try Self.channel()
        let frames = StreamOutlet(framing: .webSocket)
        frames.start(context: webSocketContext, hello: Self.hello)
        frames.finish()
        let hello = try #require(try webSocket.readOutbound(as: WebSocketFrame.self))
        #expect(hello.opcode == .text && String(buffer: hello.data) == Self.hello.json)
        let close = try #require(try webSocket.readOutbound(as: WebSocketFrame.self))
        var code = close.data
        #expect(close.opcode == .connectionClose && code.readWebSocketErrorCode() == .normalClosure)
        #expect(!webSocket.isActive)
    }
}
