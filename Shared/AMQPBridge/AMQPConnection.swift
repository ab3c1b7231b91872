internal import CRabbitMQ
import Foundation

/// Strings and tables handed to rabbitmq-c must outlive the call that uses them:
/// an arena keeps every C copy alive until the arena goes away.
final class CArena {
    private var allocations: [UnsafeMutableRawPointer] = []

    deinit { allocations.forEach { free($0) } }

    func bytes(_ string: String) -> amqp_bytes_t {
        bytes(Array(string.utf8))
    }

    func bytes(_ data: [UInt8]) -> amqp_bytes_t {
        let pointer = malloc(max(data.count, 1))!
        data.withUnsafeBytes { source in
            if let base = source.baseAddress { pointer.copyMemory(from: base, byteCount: data.count) }
        }
        allocations.append(pointer)
        return amqp_bytes_t(len: data.count, bytes: pointer)
    }

    func table(_ arguments: [String: AMQPTopology.Argument]) -> amqp_table_t {
        guard !arguments.isEmpty else { return amqp_empty_table }
        let entries = UnsafeMutablePointer<amqp_table_entry_t>.allocate(capacity: arguments.count)
        allocations.append(UnsafeMutableRawPointer(entries))
        for (index, (key, value)) in arguments.sorted(by: { $0.key < $1.key }).enumerated() {
            var field = amqp_field_value_t()
            switch value {
            case .string(let text):
                field.kind = UInt8(AMQP_FIELD_KIND_UTF8.rawValue)
                field.value.bytes = bytes(text)
            case .int(let number):
                field.kind = UInt8(AMQP_FIELD_KIND_I64.rawValue)
                field.value.i64 = number
            }
            (entries + index).initialize(to: amqp_table_entry_t(key: bytes(key), value: field))
        }
        return amqp_table_t(num_entries: Int32(arguments.count), entries: entries)
    }
}

extension amqp_bytes_t {
    var swiftString: String {
        guard let bytes, len > 0 else { return "" }
        return String(decoding: UnsafeRawBufferPointer(start: bytes, count: len), as: UTF8.self)
    }

    var byteArray: [UInt8] {
        guard let bytes, len > 0 else { return [] }
        return Array(UnsafeRawBufferPointer(start: bytes, count: len))
    }
}

func decodeTable(_ table: amqp_table_t) -> [String: AMQPTopology.Argument] {
    var result: [String: AMQPTopology.Argument] = [:]
    guard let entries = table.entries else { return result }
    for index in 0..<Int(table.num_entries) {
        let entry = entries[index]
        let key = entry.key.swiftString
        switch Int(entry.value.kind) {
        case Int(AMQP_FIELD_KIND_UTF8.rawValue), Int(AMQP_FIELD_KIND_BYTES.rawValue):
            result[key] = .string(entry.value.value.bytes.swiftString)
        case Int(AMQP_FIELD_KIND_I64.rawValue): result[key] = .int(entry.value.value.i64)
        case Int(AMQP_FIELD_KIND_I32.rawValue): result[key] = .int(Int64(entry.value.value.i32))
        case Int(AMQP_FIELD_KIND_U32.rawValue): result[key] = .int(Int64(entry.value.value.u32))
        case Int(AMQP_FIELD_KIND_I16.rawValue): result[key] = .int(Int64(entry.value.value.i16))
        case Int(AMQP_FIELD_KIND_U8.rawValue): result[key] = .int(Int64(entry.value.value.u8))
        case Int(AMQP_FIELD_KIND_I8.rawValue): result[key] = .int(Int64(entry.value.value.i8))
        default: break
        }
    }
    return result
}

/// One rabbitmq-c connection with channel 1 open. Not thread-safe: exactly one thread
/// owns it (the publisher's or the consumer's), and every call happens there.
final class AMQPConnection {
    private var state: amqp_connection_state_t?
    let channel: amqp_channel_t = 1
    private(set) var confirmsEnabled = false
    private var nextPublishSeq: UInt64 = 1

    static let rpcTimeoutSeconds = 10

    init(node endpoint: AMQPEndpoint.Node, heartbeatSeconds: Int, connectTimeout: TimeInterval = 3) throws(AMQPError) {
        guard let state = amqp_new_connection() else { throw AMQPError(.connection, "out of memory") }
        self.state = state
        guard let socket = amqp_tcp_socket_new(state) else {
            close()
            throw AMQPError(.connection, "cannot create socket")
        }
        var timeout = timeval(tv_sec: Int(connectTimeout), tv_usec: 0)
        let opened = amqp_socket_open_noblock(socket, endpoint.host, Int32(endpoint.port), &timeout)
        guard opened == AMQP_STATUS_OK.rawValue else {
            close()
            throw AMQPError(.connection, "cannot reach \(endpoint.host):\(endpoint.port): \(String(cString: amqp_error_string2(opened)))")
        }
        do {
            try check(syncline_amqp_login_plain(
                state, endpoint.vhost, 0, 131_072, Int32(heartbeatSeconds), endpoint.user, endpoint.password),
                "login")
            // Every RPC (declare, bind, confirm.select…) gives up after this long instead of
            // blocking its thread forever on a broker that stopped answering; the
            // connection is then closed and the caller reconnects.
            var rpcTimeout = timeval(tv_sec: Self.rpcTimeoutSeconds, tv_usec: 0)
            amqp_set_rpc_timeout(state, &rpcTimeout)
            amqp_channel_open(state, channel)
            try check(amqp_get_rpc_reply(state), "channel.open")
        } catch {
            close()
            throw error
        }
    }

    deinit {
        if let state { amqp_destroy_connection(state) }
    }

    var isOpen: Bool { state != nil }

    func close() {
        guard let state else { return }
        self.state = nil
        _ = amqp_channel_close(state, channel, Int32(AMQP_REPLY_SUCCESS))
        _ = amqp_connection_close(state, Int32(AMQP_REPLY_SUCCESS))
        amqp_destroy_connection(state)
    }

    /// Drops the connection without the closing handshake (it is already broken).
    func abandon() {
        guard let state else { return }
        self.state = nil
        amqp_destroy_connection(state)
    }

    private func live() throws(AMQPError) -> amqp_connection_state_t {
        guard let state else { throw AMQPError(.connection, "connection closed") }
        return state
    }

    /// The one funnel from `amqp_rpc_reply_t` to a typed error.
    func check(_ reply: amqp_rpc_reply_t, _ context: String) throws(AMQPError) {
        switch reply.reply_type {
        case AMQP_RESPONSE_NORMAL:
            return
        case AMQP_RESPONSE_LIBRARY_EXCEPTION:
            if reply.library_error == AMQP_STATUS_TIMEOUT.rawValue {
                throw AMQPError(.timeout, "\(context): timed out")
            }
            throw AMQPError(.connection, "\(context): \(String(cString: amqp_error_string2(reply.library_error)))")
        case AMQP_RESPONSE_SERVER_EXCEPTION:
            if reply.reply.id == AMQP_CONNECTION_CLOSE_METHOD, let decoded = reply.reply.decoded {
                let close = decoded.assumingMemoryBound(to: amqp_connection_close_t.self).pointee
                throw AMQPError(.closedByServer(close.reply_code), "\(context): \(close.reply_text.swiftString)")
            }
            if reply.reply.id == AMQP_CHANNEL_CLOSE_METHOD, let decoded = reply.reply.decoded {
                let close = decoded.assumingMemoryBound(to: amqp_channel_close_t.self).pointee
                throw AMQPError(.closedByServer(close.reply_code), "\(context): \(close.reply_text.swiftString)")
            }
            throw AMQPError(.connection, "\(context): server exception")
        default:
            throw AMQPError(.connection, "\(context): no reply")
        }
    }

    private func checkStatus(_ status: Int32, _ context: String) throws(AMQPError) {
        guard status == AMQP_STATUS_OK.rawValue else {
            throw AMQPError(.connection, "\(context): \(String(cString: amqp_error_string2(status)))")
        }
    }

    func declare(_ topology: AMQPTopology) throws(AMQPError) {
        let state = try live()
        let arena = CArena()
        for exchange in topology.exchanges {
            amqp_exchange_declare(
                state, channel, arena.bytes(exchange.name), arena.bytes(exchange.type), 0, 1, 0, 0, amqp_empty_table)
            try check(amqp_get_rpc_reply(state), "exchange.declare \(exchange.name)")
        }
        for queue in topology.queues {
            amqp_queue_declare(state, channel, arena.bytes(queue.name), 0, 1, 0, 0, arena.table(queue.arguments))
            try check(amqp_get_rpc_reply(state), "queue.declare \(queue.name)")
        }
        for binding in topology.bindings {
            amqp_queue_bind(
                state, channel, arena.bytes(binding.queue), arena.bytes(binding.exchange),
                arena.bytes(binding.routingKey), amqp_empty_table)
            try check(amqp_get_rpc_reply(state), "queue.bind \(binding.queue)")
        }
    }

    func queueStats(_ name: String) throws(AMQPError) -> QueueStats {
        let state = try live()
        let arena = CArena()
        let ok = amqp_queue_declare(state, channel, arena.bytes(name), 1, 0, 0, 0, amqp_empty_table)
        try check(amqp_get_rpc_reply(state), "queue.declare passive \(name)")
        guard let ok else { throw AMQPError(.connection, "queue.declare passive \(name): no answer") }
        return QueueStats(name: name, messages: Int(ok.pointee.message_count), consumers: Int(ok.pointee.consumer_count))
    }

    /// A queue's depth and consumers, or nil when no queue has that name. The broker
    /// closes the channel on a missing queue; it is opened again, so the connection stays
    /// usable (with confirms, if they were on).
    func queueStatsIfPresent(_ name: String) throws(AMQPError) -> QueueStats? {
        do {
            return try queueStats(name)
        } catch where error.code == .closedByServer(404) {
            try reopenChannel()
            return nil
        }
    }

    /// Answers the broker's channel.close and opens the channel again.
    private func reopenChannel() throws(AMQPError) {
        let state = try live()
        var closeOK = amqp_channel_close_ok_t(dummy: 0)
        try checkStatus(amqp_send_method(state, channel, AMQP_CHANNEL_CLOSE_OK_METHOD, &closeOK), "channel.close-ok")
        amqp_channel_open(state, channel)
        try check(amqp_get_rpc_reply(state), "channel.open")
        if confirmsEnabled { try enableConfirms() }
    }

    func bind(queue: String, exchange: String, routingKey: String) throws(AMQPError) {
        let state = try live()
        let arena = CArena()
        amqp_queue_bind(state, channel, arena.bytes(queue), arena.bytes(exchange), arena.bytes(routingKey), amqp_empty_table)
        try check(amqp_get_rpc_reply(state), "queue.bind \(queue)")
    }

    func unbind(queue: String, exchange: String, routingKey: String) throws(AMQPError) {
        let state = try live()
        let arena = CArena()
        amqp_queue_unbind(state, channel, arena.bytes(queue), arena.bytes(exchange), arena.bytes(routingKey), amqp_empty_table)
        try check(amqp_get_rpc_reply(state), "queue.unbind \(queue)")
    }

    func deleteQueue(_ name: String) throws(AMQPError) {
        let state = try live()
        let arena = CArena()
        amqp_queue_delete(state, channel, arena.bytes(name), 0, 0)
        try check(amqp_get_rpc_reply(state), "queue.delete \(name)")
    }

    func enableConfirms() throws(AMQPError) {
        let state = try live()
        amqp_confirm_select(state, channel)
        try check(amqp_get_rpc_reply(state), "confirm.select")
        confirmsEnabled = true
        nextPublishSeq = 1
    }

    /// Publishes every message, then waits until the broker confirmed all of them.
    /// Throws `.notConfirmed` when any was nacked or returned as unroutable.
    func publishConfirmed(_ messages: [OutgoingMessage], timeout: TimeInterval) throws(AMQPError) {
        let state = try live()
        precondition(confirmsEnabled, "publishConfirmed needs enableConfirms()")
        let arena = CArena()
        let firstSeq = nextPublishSeq
        for message in messages {
            var properties = amqp_basic_properties_t()
            properties._flags = UInt32(AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG)
            properties.content_type = arena.bytes("application/json")
            properties.delivery_mode = 2
            if let id = message.messageID {
                properties._flags |= UInt32(AMQP_BASIC_MESSAGE_ID_FLAG)
                properties.message_id = arena.bytes(id)
            }
            if !message.headers.isEmpty {
                properties._flags |= UInt32(AMQP_BASIC_HEADERS_FLAG)
                properties.headers = arena.table(message.headers)
            }
            let status = amqp_basic_publish(
                state, channel, arena.bytes(message.exchange), arena.bytes(message.routingKey),
                message.mandatory ? 1 : 0, 0, &properties, arena.bytes(message.body))
            try checkStatus(status, "basic.publish")
            nextPublishSeq += 1
        }
        try awaitConfirms(from: firstSeq, through: nextPublishSeq - 1, timeout: timeout)
    }

    private func awaitConfirms(from first: UInt64, through last: UInt64, timeout: TimeInterval) throws(AMQPError) {
        let state = try live()
        let deadline = Date().addingTimeInterval(timeout)
        var confirmedThrough = first - 1
        var pendingSingles = Set<UInt64>()
        var failed = false
        while confirmedThrough < last {
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0 else { throw AMQPError(.timeout, "no publisher confirm in \(timeout)s") }
            var wait = timeval(seconds: remaining)
            var frame = amqp_frame_t()
            let status = amqp_simple_wait_frame_noblock(state, &frame, &wait)
            if status == AMQP_STATUS_TIMEOUT.rawValue { continue }
            try checkStatus(status, "waiting for confirms")
            guard frame.frame_type == UInt8(AMQP_FRAME_METHOD) else { continue }
            let method = frame.payload.method
            var tag: UInt64 = 0, multiple = false
            switch method.id {
            case AMQP_BASIC_ACK_METHOD:
                let ack = method.decoded.assumingMemoryBound(to: amqp_basic_ack_t.self).pointee
                (tag, multiple) = (ack.delivery_tag, ack.multiple != 0)
            case AMQP_BASIC_NACK_METHOD:
                let nack = method.decoded.assumingMemoryBound(to: amqp_basic_nack_t.self).pointee
                (tag, multiple) = (nack.delivery_tag, nack.multiple != 0)
                failed = true
            case AMQP_BASIC_RETURN_METHOD:
                // The returned message's header and body follow; read them off the wire.
                failed = true
                var message = amqp_message_t()
                try check(amqp_read_message(state, frame.channel, &message, 0), "reading returned message")
                amqp_destroy_message(&message)
                continue
            case AMQP_CHANNEL_CLOSE_METHOD, AMQP_CONNECTION_CLOSE_METHOD:
                throw AMQPError(.closedByServer(0), "broker closed the channel while confirming")
            default:
                continue
            }
            if multiple {
                confirmedThrough = max(confirmedThrough, tag)
            } else {
                pendingSingles.insert(tag)
            }
            while pendingSingles.remove(confirmedThrough + 1) != nil { confirmedThrough += 1 }
            pendingSingles = pendingSingles.filter { $0 > confirmedThrough }
        }
        amqp_maybe_release_buffers(state)
        if failed { throw AMQPError(.notConfirmed, "the broker nacked or returned a message") }
    }

    // MARK: sweeping a queue

    /// The next ready message of `queue`, taken unacked (basic.get), or nil when it is empty.
    private func get(_ queue: String) throws(AMQPError) -> AMQPDelivery? {
        let state = try live()
        let arena = CArena()
        let reply = amqp_basic_get(state, channel, arena.bytes(queue), 0)
        try check(reply, "basic.get \(queue)")
        guard reply.reply.id == AMQP_BASIC_GET_OK_METHOD, let decoded = reply.reply.decoded else { return nil }
        let tag = decoded.assumingMemoryBound(to: amqp_basic_get_ok_t.self).pointee.delivery_tag
        var message = amqp_message_t()
        try check(amqp_read_message(state, channel, &message, 0), "reading \(queue)")
        defer {
            amqp_destroy_message(&message)
            amqp_maybe_release_buffers(state)
        }
        let properties = message.properties
        let hasID = properties._flags & UInt32(AMQP_BASIC_MESSAGE_ID_FLAG) != 0
        let hasHeaders = properties._flags & UInt32(AMQP_BASIC_HEADERS_FLAG) != 0
        return AMQPDelivery(
            body: message.body.byteArray,
            messageID: hasID ? properties.message_id.swiftString : nil,
            headers: hasHeaders ? decodeTable(properties.headers) : [:],
            redelivered: false, exchange: "", routingKey: queue, deliveryTag: tag, generation: 0)
    }

    /// Reads the ready messages of `queue` one by one (basic.get, at most `limit`), acks
    /// those `remove` picks and hands every other one back in its place (basic.nack with
    /// requeue), so an operator's tool can take single messages out of a parked queue.
    func sweep(queue: String, limit: Int, remove: (AMQPDelivery) -> Bool) throws(AMQPError) -> SweepResult {
        let state = try live()
        var result = SweepResult(examined: 0, removed: 0)
        var lastKept: UInt64?
        var removedTags: [UInt64] = []
        while result.examined < limit, let delivery = try get(queue) {
            let tag = delivery.deliveryTag
            result.examined += 1
            if remove(delivery) { removedTags.append(tag) } else { lastKept = tag }
        }
        for tag in removedTags { try ack(tag) }
        if let lastKept {
            try checkStatus(amqp_basic_nack(state, channel, lastKept, 1, 1), "basic.nack")
        }
        result.removed = removedTags.count
        // A round trip, so the acks and the hand-back are processed before the caller
        // reads the queue's depth.
        _ = try queueStats(queue)
        return result
    }

    /// Moves every ready message of `source` into the queue `destination` (through the
    /// default exchange), body, id and headers unchanged: each batch is published and
    /// confirmed before it is acked, so a failure in between leaves copies in both queues,
    /// never a message in neither. Returns how many moved.
    func moveMessages(from source: String, to destination: String, timeout: TimeInterval) throws(AMQPError) -> Int {
        let state = try live()
        var moved = 0
        while true {
            var batch: [AMQPDelivery] = []
            while batch.count < 100, let delivery = try get(source) { batch.append(delivery) }
            guard let last = batch.last else { return moved }
            let copies = batch.map {
                OutgoingMessage(exchange: "", routingKey: destination, body: $0.body, messageID: $0.messageID, headers: $0.headers)
            }
            try publishConfirmed(copies, timeout: timeout)
            try checkStatus(amqp_basic_ack(state, channel, last.deliveryTag, 1), "basic.ack")
            moved += batch.count
        }
    }

    // MARK: consuming

    func consume(queue: String, prefetch: UInt16, consumerTag: String) throws(AMQPError) {
        let state = try live()
        let arena = CArena()
        amqp_basic_qos(state, channel, 0, prefetch, 0)
        try check(amqp_get_rpc_reply(state), "basic.qos")
        amqp_basic_consume(state, channel, arena.bytes(queue), arena.bytes(consumerTag), 0, 0, 0, amqp_empty_table)
        try check(amqp_get_rpc_reply(state), "basic.consume \(queue)")
    }

    func cancel(consumerTag: String) throws(AMQPError) {
        let state = try live()
        let arena = CArena()
        amqp_basic_cancel(state, channel, arena.bytes(consumerTag))
        try check(amqp_get_rpc_reply(state), "basic.cancel")
    }

    var socketDescriptor: Int32 { state.map { amqp_get_sockfd($0) } ?? -1 }

    /// Whether a message may be read without touching the socket.
    var hasBufferedInput: Bool {
        guard let state else { return false }
        return amqp_frames_enqueued(state) != 0 || amqp_data_in_buffer(state) != 0
    }

    enum ConsumeOutcome {
        case delivery(AMQPDelivery)
        case nothing
    }

    func nextDelivery(timeout: TimeInterval, generation: Int) throws(AMQPError) -> ConsumeOutcome {
        let state = try live()
        amqp_maybe_release_buffers(state)
        var envelope = amqp_envelope_t()
        var wait = timeval(seconds: timeout)
        let reply = amqp_consume_message(state, &envelope, &wait, 0)
        if reply.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION {
            if reply.library_error == AMQP_STATUS_TIMEOUT.rawValue { return .nothing }
            if reply.library_error == AMQP_STATUS_UNEXPECTED_STATE.rawValue {
                // A frame other than a delivery (e.g. the broker closing the channel).
                var frame = amqp_frame_t()
                var zero = timeval(tv_sec: 0, tv_usec: 0)
                let status = amqp_simple_wait_frame_noblock(state, &frame, &zero)
                if status == AMQP_STATUS_TIMEOUT.rawValue { return .nothing }
                try checkStatus(status, "reading frame")
                if frame.frame_type == UInt8(AMQP_FRAME_METHOD) {
                    let id = frame.payload.method.id
                    if id == AMQP_CHANNEL_CLOSE_METHOD || id == AMQP_CONNECTION_CLOSE_METHOD {
                        throw AMQPError(.closedByServer(0), "broker closed the channel")
                    }
                }
                return .nothing
            }
        }
        try check(reply, "basic.consume")
        defer { amqp_destroy_envelope(&envelope) }
        let properties = envelope.message.properties
        let hasID = properties._flags & UInt32(AMQP_BASIC_MESSAGE_ID_FLAG) != 0
        let hasHeaders = properties._flags & UInt32(AMQP_BASIC_HEADERS_FLAG) != 0
        return .delivery(AMQPDelivery(
            body: envelope.message.body.byteArray,
            messageID: hasID ? properties.message_id.swiftString : nil,
            headers: hasHeaders ? decodeTable(properties.headers) : [:],
            redelivered: envelope.redelivered != 0,
            exchange: envelope.exchange.swiftString,
            routingKey: envelope.routing_key.swiftString,
            deliveryTag: envelope.delivery_tag,
            generation: generation))
    }

    func ack(_ tag: UInt64) throws(AMQPError) {
        try checkStatus(amqp_basic_ack(try live(), channel, tag, 0), "basic.ack")
    }

    func reject(_ tag: UInt64, requeue: Bool) throws(AMQPError) {
        try checkStatus(amqp_basic_reject(try live(), channel, tag, requeue ? 1 : 0), "basic.reject")
    }
}

extension timeval {
    init(seconds: TimeInterval) {
        let whole = Int(seconds)
        self.init(tv_sec: whole, tv_usec: Int((seconds - Double(whole)) * 1_000_000))
    }
}
