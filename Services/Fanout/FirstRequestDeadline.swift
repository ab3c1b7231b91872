import Hummingbird
import HummingbirdCore
import HummingbirdWebSocket
import Logging
import NIOCore

/// hummingbird-websocket starts its idle timeout only once it has decided a connection is
/// not a WebSocket upgrade, that is once the first request's head is whole: a client that
/// stops mid-headers would hold the connection forever. This closes a connection that has
/// had no answer within `timeout` of opening; later requests on it are under the idle
/// timeout proper.
struct FirstRequestDeadlineChannel<Inner: ServerChildChannel>: ServerChildChannel {
    let inner: Inner
    let timeout: TimeAmount

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Inner.Value> {
        let timeout = self.timeout
        return channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(FirstAnswerDeadlineHandler(timeout: timeout), position: .first)
        }.flatMap { inner.setup(channel: channel, logger: logger) }
    }

    func handle(value: Inner.Value, logger: Logger) async {
        await inner.handle(value: value, logger: logger)
    }
}

/// Closes the channel unless something is written to it within `timeout` of it opening.
final class FirstAnswerDeadlineHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = IOData

    private let timeout: TimeAmount
    private var deadline: Scheduled<Void>?
    private var answered = false

    init(timeout: TimeAmount) { self.timeout = timeout }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { schedule(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        schedule(context)
        context.fireChannelActive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        deadline?.cancel()
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if !answered {
            answered = true
            deadline?.cancel()
            deadline = nil
        }
        context.write(data, promise: promise)
    }

    private func schedule(_ context: ChannelHandlerContext) {
        guard deadline == nil, !answered else { return }
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        deadline = context.eventLoop.scheduleTask(in: timeout) { loopBound.value.close(promise: nil) }
    }
}
