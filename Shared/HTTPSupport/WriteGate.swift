import NIOConcurrencyHelpers
import NIOCore
import NIOHTTPTypes

/// The response body bytes a connection has been handed and not yet written to its
/// socket, for a writer that must not run ahead of its client.
///
/// A channel's writability cannot bound that: a writer on another thread learns of it a
/// hop later, and meanwhile hands over as many pieces as it can read. So the writer counts
/// what it hands over (`handOver`), the connection's `WriteGateHandler` counts what the
/// socket has taken (or the connection failed), and `wait(untilAtMost:)` returns once no
/// more than that many bytes are still waiting — or the connection has closed.
public final class WriteGate: Sendable {
    private struct State {
        var waiting = 0
        var closed = false
        var waiters: [(limit: Int, continuation: CheckedContinuation<Void, Never>)] = []

        /// Whether a writer waiting until at most `limit` bytes wait may go on.
        func allows(_ limit: Int) -> Bool { closed || waiting <= limit }
    }

    private let state = NIOLockedValueBox(State())

    public init() {}

    /// The bytes handed over and not yet written.
    public var waitingBytes: Int { state.withLockedValue { $0.waiting } }

    /// Counts body bytes about to be written to the connection (before the write).
    public func handOver(_ bytes: Int) {
        state.withLockedValue { $0.waiting += bytes }
    }

    /// Returns once at most `limit` bytes wait to be written, or the connection is closed.
    public func wait(untilAtMost limit: Int) async {
        await withCheckedContinuation { continuation in
            let ready = state.withLockedValue { state in
                guard !state.allows(limit) else { return true }
                state.waiters.append((limit, continuation))
                return false
            }
            if ready { continuation.resume() }
        }
    }

    func written(_ bytes: Int) {
        resumeWaiters { $0.waiting = max(0, $0.waiting - bytes) }
    }

    func close() {
        resumeWaiters { $0.closed = true }
    }

    /// Changes the state, then resumes the waiters it now allows to go on.
    private func resumeWaiters(after change: (inout State) -> Void) {
        let ready = state.withLockedValue { state in
            change(&state)
            let ready = state.waiters.filter { state.allows($0.limit) }.map(\.continuation)
            state.waiters = state.waiters.filter { !state.allows($0.limit) }
            return ready
        }
        for continuation in ready { continuation.resume() }
    }
}

/// Keeps a connection's `WriteGate`: placed after the HTTP codec, it counts each body
/// part of a response as written when its write completes, and closes the gate with the
/// connection. Body parts nobody handed over (every response but a gated download) are
/// not counted.
public final class WriteGateHandler: ChannelDuplexHandler, RemovableChannelHandler {
    public typealias InboundIn = HTTPRequestPart
    public typealias OutboundIn = HTTPResponsePart
    public typealias OutboundOut = HTTPResponsePart

    public let gate = WriteGate()

    public init() {}

    public func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard case .body(let buffer) = unwrapOutboundIn(data), gate.waitingBytes > 0 else {
            return context.write(data, promise: promise)
        }
        let bytes = buffer.readableBytes
        let promise = promise ?? context.eventLoop.makePromise()
        promise.futureResult.whenComplete { [gate] _ in gate.written(bytes) }
        context.write(data, promise: promise)
    }

    public func channelInactive(context: ChannelHandlerContext) {
        gate.close()
        context.fireChannelInactive()
    }

    public func handlerRemoved(context: ChannelHandlerContext) {
        gate.close()
    }
}

extension WriteGate {
    /// The gate of a connection whose pipeline has a `WriteGateHandler`; nil without one.
    public static func of(_ channel: any Channel) async -> WriteGate? {
        try? await channel.eventLoop.submit {
            try channel.pipeline.syncOperations.handler(type: WriteGateHandler.self).gate
        }.get()
    }
}
