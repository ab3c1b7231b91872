import HTTPTypes
import Metrics
import NIOCore
import NIOHTTPTypes

#if canImport(Glibc)
import Glibc
#endif

/// When a connection is too slow to keep: the rules of `TransferGuardHandler`, apart from
/// the channel, so that they have tests of their own.
/// - A response the client stops reading: once a part of it has waited `stallTimeout`
///   for the socket to take it, with no other part taken meanwhile, it is closed. Whether
///   the channel is writable does not matter: a stalled reader waiting on a small piece
///   keeps a writable channel, and its kernel buffers, as long as one waiting on a large one.
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
    /// Response parts handed to the socket and not yet taken, and since when the socket
    /// last took one while others waited (or the first was handed over).
    private var writesWaiting = 0
    private var writtenSince: Double?

    public init(limits: Limits) { self.limits = limits }

    /// Whether anything is being watched (a body coming in, or a response held up).
    public var isWatching: Bool { bodyOpen || writtenSince != nil }

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

    /// A response part handed to the socket.
    public mutating func responseWriteStarted(at now: Double) {
        writesWaiting += 1
        if writtenSince == nil { writtenSince = now }
    }

    /// A response part the socket took (or that failed with the connection): progress.
    public mutating func responseWriteFinished(at now: Double) {
        writesWaiting = max(0, writesWaiting - 1)
        writtenSince = writesWaiting > 0 ? now : nil
    }

    /// Whether a response part waits for the socket.
    public var responseWaiting: Bool { writesWaiting > 0 }

    public mutating func verdict(at now: Double) -> Verdict {
        if let since = writtenSince, now - since >= limits.stallTimeout { return .closeStalledResponse }
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
/// reading a download, or trickles an upload, cannot hold the gateway's memory or its
/// kernel buffers: placed after the HTTP codec, it sees request parts, the reads asked of
/// the socket and when the socket takes each response part. Checks once a second while
/// something is watched.
///
/// It also bounds the kernel's send buffer of the connection (`SO_SNDBUF`, when
/// `sendBufferBytes` is set): what a reader that stops can pin in the kernel on top of the
/// one piece the gateway holds for it.
public final class TransferGuardHandler: ChannelDuplexHandler, RemovableChannelHandler {
    public typealias InboundIn = HTTPRequestPart
    public typealias InboundOut = HTTPRequestPart
    public typealias OutboundIn = HTTPResponsePart
    public typealias OutboundOut = HTTPResponsePart

    private var rules: TransferGuard
    private var ticker: RepeatedTask?
    private let sendBufferBytes: Int?

    public init(limits: TransferGuard.Limits, sendBufferBytes: Int? = nil) {
        rules = TransferGuard(limits: limits)
        self.sendBufferBytes = sendBufferBytes
    }

    public func handlerAdded(context: ChannelHandlerContext) {
        guard let sendBufferBytes else { return }
        // Linux doubles what it is asked for (the other half is its bookkeeping).
        context.channel.setOption(ChannelOptions.socketOption(.so_sndbuf), value: SocketOptionValue(max(1, sendBufferBytes / 2)))
            .whenFailure { _ in }
    }

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

    public func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let promise = promise ?? context.eventLoop.makePromise()
        rules.responseWriteStarted(at: Self.now)
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        promise.futureResult.whenComplete { _ in loopBound.value.rules.responseWriteFinished(at: Self.now) }
        context.write(data, promise: promise)
    }

    public func flush(context: ChannelHandlerContext) {
        context.flush()
        // The socket takes what it can during the flush: what still waits is watched.
        if rules.responseWaiting { watch(context) }
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
        // Aborted (a reset, `SO_LINGER` 0), not closed: a close would queue its FIN behind
        // the bytes the client never took, and the kernel would keep them, and the socket,
        // for minutes, sending them again into a window that stays shut.
        let channel = context.channel
        guard let options = channel as? any SocketOptionProvider else { return channel.close(promise: nil) }
        options.setSoLinger(linger(l_onoff: 1, l_linger: 0)).whenComplete { _ in channel.close(promise: nil) }
    }

    private func stopWatching() {
        ticker?.cancel()
        ticker = nil
    }
}
