import HTTPSupport
import HTTPTypes
import NIOCore
import NIOEmbedded
import NIOHTTPTypes
import Testing

/// How a download is paced, without a socket: the pieces it may take, and the gate that
/// tells when the connection has written what it was handed.
struct DownloadPacingTests {
    @Test func piecesBeyondTheSmallestComeFromTheSharedBudget() {
        let pieces = DownloadPieces(budget: 1 << 20)
        let large = pieces.take(DownloadPieces.largest)
        #expect(large == 1 << 20 && pieces.availableBytes == DownloadPieces.smallest)
        #expect(pieces.take(64 << 10) == 2 * DownloadPieces.smallest, "what is left of the budget")
        #expect(pieces.take(DownloadPieces.largest) == DownloadPieces.smallest, "the smallest piece needs no budget")
        pieces.giveBack(DownloadPieces.smallest)
        pieces.giveBack(large)
        pieces.giveBack(2 * DownloadPieces.smallest)
        #expect(pieces.availableBytes == 1 << 20)
        #expect(pieces.take(10 << 20) == DownloadPieces.largest)
    }

    @Test func aPaceGrowsWhileTheClientKeepsUpAndHalvesWhenItFallsBehind() {
        var pace = DownloadPieces.Pace()
        #expect(pace.next == DownloadPieces.smallest)
        for _ in 0..<10 { pace.pieceWritten(waited: .milliseconds(1)) }
        #expect(pace.next == DownloadPieces.largest)
        pace.pieceWritten(waited: .milliseconds(80))
        #expect(pace.next == DownloadPieces.largest / 2)
        for _ in 0..<10 { pace.pieceWritten(waited: .seconds(2)) }
        #expect(pace.next == DownloadPieces.smallest)
    }

    static func body(_ bytes: Int) -> HTTPResponsePart { .body(ByteBuffer(repeating: 1, count: bytes)) }

    @Test func theGateCountsWhatWasHandedOverUntilTheSocketTookIt() async throws {
        let handler = WriteGateHandler()
        let channel = EmbeddedChannel(handler: handler)
        let gate = handler.gate
        gate.handOver(100)
        channel.write(Self.body(100), promise: nil)
        #expect(gate.waitingBytes == 100, "written to the pipeline, not yet to the socket")
        channel.flush()
        #expect(gate.waitingBytes == 0)
        await gate.wait(untilAtMost: 0)
        // A body nobody handed over (any other response) is not counted.
        channel.write(Self.body(50), promise: nil)
        channel.flush()
        #expect(gate.waitingBytes == 0)
        _ = try channel.finish()
    }

    @Test func aWaitEndsWhenTheSocketTakesTheBytesOrTheConnectionCloses() async throws {
        let handler = WriteGateHandler()
        let channel = EmbeddedChannel(handler: handler)
        let gate = handler.gate
        gate.handOver(10)
        channel.write(Self.body(10), promise: nil)
        let waiting = Task { await gate.wait(untilAtMost: 0); return gate.waitingBytes }
        try await Task.sleep(for: .milliseconds(50))
        channel.flush()
        #expect(await waiting.value == 0)

        gate.handOver(10)
        channel.write(Self.body(10), promise: nil)
        let closed = Task { await gate.wait(untilAtMost: 0) }
        try await Task.sleep(for: .milliseconds(50))
        _ = try? channel.finish()
        await closed.value
        gate.handOver(10)
        await gate.wait(untilAtMost: 0)  // a closed connection never blocks a writer again
    }
}
