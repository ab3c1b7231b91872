import NIOCore

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
