import HTTPTypes
import Metrics
import NIOCore
import NIOHTTPTypes

/// When a connection is too slow to keep: the rules of `TransferGuardHandler`, apart from
/// the channel, so that they have tests of their own.
/// - A response the client stops reading: once the connection's outbound buffer is full
///   (the channel unwritable) for `stallTimeout`, it is closed.
/// - A request body that trickles: over each `stallTimeout` of waiting for the client
///   (a read asked for and no bytes yet), it must deliver `minimumRate` bytes a second,
///   or it is closed. Time the server itself spends not reading (storing what came) does
///   not count.
public struct TransferGuard: Sendable, Equatable {
    public struct Limits: Sendable, Equatable {
        public var stallTimeout: Double
        public var minimumRate: Double

        public init(stallTimeout: Double, minimumRate: Double) {
            self.stallTimeout = stallTimeout
            self.minimumRate = minimumRate
        }
    }

    public enum Verdict: Sendable, Equatable {
        case keep
        case closeStalledResponse
        case closeSlowRequestBody
    }

    let limits: Limits
    private(set) var bodyOpen = false
    /// Since when a read is asked for and the client has sent nothing.
    private var waitingSince: Double?
    /// Seconds waited on the client in this window, and the body bytes it sent.
    private var waited: Double = 0
    private var received: Int = 0
    private var unwritableSince: Double?

    public init(limits: Limits) { self.limits = limits }

    /// Whether anything is being watched (a body coming in, or a response held up).
    public var isWatching: Bool { bodyOpen || unwritableSince != nil }

    public mutating func requestHead() {
        bodyOpen = true
        waitingSince = nil
        waited = 0
        received = 0
    }

    public mutating func requestBody(bytes: Int, at now: Double) {
        if let since = waitingSince { waited += now - since }
        waitingSince = nil
        received += bytes
    }

    public mutating func requestEnd() {
        bodyOpen = false
        waitingSince = nil
    }

    public mutating func readRequested(at now: Double) {
        if bodyOpen, waitingSince == nil { waitingSince = now }
    }

    public mutating func writability(_ writable: Bool, at now: Double) {
        if writable {
            unwritableSince = nil
        } else if unwritableSince == nil {
            unwritableSince = now
        }
    }

    public mutating func verdict(at now: Double) -> Verdict {
        if let since = unwritableSince, now - since >= limits.stallTimeout { return .closeStalledResponse }
        guard bodyOpen else { return .keep }
        let waitedNow = waited + (waitingSince.map { now - $0 } ?? 0)
        guard waitedNow >= limits.stallTimeout else { return .keep }
        if Double(received) < limits.minimumRate * waitedNow { return .closeSlowRequestBody }
        // A new window.
        waited = 0
        received = 0
        if waitingSince != nil { waitingSince = now }
        return .keep
    }
}

/// Closes connections that `TransferGuard` finds too slow, so that a client that stops
/// reading a download, or trickles an upload, cannot hold the gateway's memory: placed
/// after the HTTP codec, it sees request parts, the reads asked of the socket and the
/// channel's writability. Checks once a second while something is watched.
public final class TransferGuardHandler: ChannelDuplexHandler, RemovableChannelHandler {
    public typealias InboundIn = HTTPRequestPart
    public typealias InboundOut = HTTPRequestPart
    public typealias OutboundIn = HTTPResponsePart
    public typealias OutboundOut = HTTPResponsePart

    private var rules: TransferGuard
    private var ticker: RepeatedTask?

    public init(limits: TransferGuard.Limits) { rules = TransferGuard(limits: limits) }

    private static var now: Double { Double(NIODeadline.now().uptimeNanoseconds) / 1e9 }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            rules.requestHead()
        case .body(let buffer):
            // Watched from a body's first bytes: a request that sends none is the idle
            // timeout's.
            rules.requestBody(bytes: buffer.readableBytes, at: Self.now)
            watch(context)
        case .end:
            rules.requestEnd()
            if ticker != nil { watch(context) }
        }
        context.fireChannelRead(data)
    }

    public func read(context: ChannelHandlerContext) {
        rules.readRequested(at: Self.now)
        context.read()
    }

    public func channelWritabilityChanged(context: ChannelHandlerContext) {
        rules.writability(context.channel.isWritable, at: Self.now)
        watch(context)
        context.fireChannelWritabilityChanged()
    }

    public func channelInactive(context: ChannelHandlerContext) {
        stopWatching()
        context.fireChannelInactive()
    }

    public func handlerRemoved(context: ChannelHandlerContext) {
        stopWatching()
    }

    private func watch(_ context: ChannelHandlerContext) {
        guard rules.isWatching else { return stopWatching() }
        guard ticker == nil else { return }
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        ticker = context.eventLoop.scheduleRepeatedTask(initialDelay: .seconds(1), delay: .seconds(1)) { _ in
            let (handler, context) = loopBound.value
            handler.tick(context)
        }
    }

    private func tick(_ context: ChannelHandlerContext) {
        let reason: String
        switch rules.verdict(at: Self.now) {
        case .keep:
            if !rules.isWatching { stopWatching() }
            return
        case .closeStalledResponse: reason = "stalled_response"
        case .closeSlowRequestBody: reason = "slow_request_body"
        }
        stopWatching()
        Counter(label: "syncline_http_slow_connections_closed_total", dimensions: [("reason", reason)]).increment()
        context.close(promise: nil)
    }

    private func stopWatching() {
        ticker?.cancel()
        ticker = nil
    }
}
