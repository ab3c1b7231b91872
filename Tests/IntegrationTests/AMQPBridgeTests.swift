import AMQPBridge
import Foundation
import TestSupport
import Testing

@Suite("rabbitmq-c bridge", .enabled(if: TestEnvironment.hasServers), .serialized, .timeLimit(.minutes(3)))
struct AMQPBridgeTests {
    let endpoint = AMQPEndpoint(url: TestEnvironment.amqpURL ?? "amqp://localhost")!

    func topology(_ queue: String) -> AMQPTopology {
        AMQPTopology(queues: [.init(name: queue)])
    }

    func message(_ queue: String, _ text: String) -> OutgoingMessage {
        OutgoingMessage(exchange: "", routingKey: queue, body: Array(text.utf8), messageID: text, headers: ["x-n": .int(7), "x-s": .string("v")])
    }

    func next(_ consumer: AMQPConsumer, within seconds: Double = 10) async -> AMQPDelivery? {
        await withTaskGroup(of: AMQPDelivery?.self) { group in
            group.addTask {
                var iterator = consumer.deliveries.makeAsyncIterator()
                return await iterator.next()
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(seconds))
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }

    @Test func endpointParsing() {
        let parsed = AMQPEndpoint(url: "amqp://u%40x:p%2Fw@broker:5673/my%2Fvhost")?.nodes.first
        #expect(parsed?.user == "u@x")
        #expect(parsed?.password == "p/w")
        #expect(parsed?.host == "broker" && parsed?.port == 5673)
        #expect(parsed?.vhost == "my/vhost")
        #expect(AMQPEndpoint(url: "amqp://h")?.vhost == "/")
        #expect(AMQPEndpoint(url: "http://h") == nil)
        let cluster = AMQPEndpoint(url: "amqp://a:b@r1:5701/v, amqp://a:b@r2:5702/v,amqp://a:b@r3/v")
        #expect(cluster?.nodes.map(\.description) == ["r1:5701", "r2:5702", "r3:5672"])
        #expect(AMQPEndpoint(url: "amqp://r1/v,amqp://r2/w") == nil, "every node serves one virtual host")
        #expect(AMQPEndpoint(url: "amqp://r1/v,http://r2/v") == nil)
    }

    /// The publisher and a consumer reach the live node of a list, past dead ones.
    @Test func aClientMovesPastADeadNode() async throws {
        let node = try #require(endpoint.nodes.first)
        let dead = "amqp://\(node.user):\(node.password)@127.0.0.1:1/\(node.vhost.replacingOccurrences(of: "/", with: "%2F"))"
        let live = "amqp://\(node.user):\(node.password)@\(node.host):\(node.port)/\(node.vhost.replacingOccurrences(of: "/", with: "%2F"))"
        // The first node tried is a random one: with seven dead nodes of eight, a client
        // that could not move past a dead node fails here seven times in eight.
        let cluster = try #require(AMQPEndpoint(url: (Array(repeating: dead, count: 7) + [live]).joined(separator: ",")))
        let queue = "test.bridge.\(UUID().uuidString)"
        let publisher = AMQPPublisher(endpoint: cluster, topology: topology(queue), logger: TestEnvironment.logger)
        try await publisher.publish([message(queue, "over the live node")])
        let consumer = AMQPConsumer(
            configuration: .init(endpoint: cluster, topology: topology(queue), queue: queue, prefetch: 1),
            logger: TestEnvironment.logger)
        consumer.start()
        let delivered = await next(consumer)
        #expect(delivered.map { String(decoding: $0.body, as: UTF8.self) } == "over the live node")
        if let delivered { consumer.ack(delivered) }
        await consumer.close()
        try await publisher.deleteQueue(queue)
        await publisher.shutdown()
    }

    @Test func confirmedPublishThenManualAck() async throws {
        let queue = "test.bridge.\(UUID().uuidString)"
        let publisher = AMQPPublisher(endpoint: endpoint, topology: topology(queue), logger: TestEnvironment.logger)
        try await publisher.publish((0..<50).map { message(queue, "m\($0)") })
        #expect(try await publisher.queueStats([queue]).first?.messages == 50)

        let consumer = AMQPConsumer(
            configuration: .init(endpoint: endpoint, topology: topology(queue), queue: queue, prefetch: 10),
            logger: TestEnvironment.logger)
        consumer.start()
        var seen: [String] = []
        for await delivery in consumer.deliveries {
            seen.append(String(decoding: delivery.body, as: UTF8.self))
            #expect(delivery.header("x-n") == "7" && delivery.header("x-s") == "v")
            consumer.ack(delivery)
            if seen.count == 50 { break }
        }
        #expect(seen == (0..<50).map { "m\($0)" })
        try await Task.sleep(for: .milliseconds(300))
        await consumer.close()
        #expect(try await publisher.queueStats([queue]).first?.messages == 0)
        try await publisher.deleteQueue(queue)
        await publisher.shutdown()
    }

    /// Callers take turns: while one batch waits for its confirms the next callers' messages
    /// gather and go out together. A caller cancelled while it leads a batch must not fail
    /// the others', and no message is lost or doubled.
    @Test func concurrentCallersShareBatchesAndACancelledOneFailsNoOther() async throws {
        let queue = "test.bridge.\(UUID().uuidString)"
        let publisher = AMQPPublisher(endpoint: endpoint, topology: topology(queue), logger: TestEnvironment.logger)
        try await publisher.publish([message(queue, "first")])
        // Waves of callers, the first of each cancelled before it publishes: it arrives when
        // the previous wave's batch is under way, and so leads the next batch.
        var callers: [(cancelled: Bool, task: Task<Bool, Never>)] = []
        for wave in 0..<40 {
            for n in 0..<8 {
                let cancelled = n == 0
                callers.append((cancelled, Task { () -> Bool in
                    if cancelled { withUnsafeCurrentTask { $0?.cancel() } }
                    do {
                        try await publisher.publish([message(queue, "w\(wave)m\(n)")])
                        return true
                    } catch {
                        return false
                    }
                }))
            }
            try await Task.sleep(for: .milliseconds(1))
        }
        var published = 0
        for (n, caller) in callers.enumerated() {
            let succeeded = await caller.task.value
            if succeeded { published += 1 }
            if !caller.cancelled { #expect(succeeded, "caller \(n) was not cancelled, yet its publish failed") }
        }
        #expect(try await publisher.queueStats([queue]).first?.messages == 1 + published)
        try await publisher.deleteQueue(queue)
        await publisher.shutdown()
    }

    @Test func unroutableMandatoryPublishIsNotConfirmed() async throws {
        let publisher = AMQPPublisher(endpoint: endpoint, topology: AMQPTopology(), logger: TestEnvironment.logger)
        do {
            try await publisher.publish([message("no.such.queue.\(UUID().uuidString)", "lost")])
            Issue.record("an unroutable message must not count as published")
        } catch let error as AMQPError {
            #expect(error.code == .notConfirmed)
        }
        await publisher.shutdown()
    }

    @Test func unackedMessageIsRedeliveredAfterConsumerConnectionCloses() async throws {
        let queue = "test.bridge.\(UUID().uuidString)"
        let publisher = AMQPPublisher(endpoint: endpoint, topology: topology(queue), logger: TestEnvironment.logger)
        try await publisher.publish([message(queue, "only")])

        let first = AMQPConsumer(
            configuration: .init(endpoint: endpoint, topology: topology(queue), queue: queue, prefetch: 1),
            logger: TestEnvironment.logger)
        first.start()
        let delivered = await next(first)
        #expect(delivered?.redelivered == false)
        await first.close()  // never acked

        let second = AMQPConsumer(
            configuration: .init(endpoint: endpoint, topology: topology(queue), queue: queue, prefetch: 1),
            logger: TestEnvironment.logger)
        second.start()
        let again = try #require(await next(second))
        #expect(String(decoding: again.body, as: UTF8.self) == "only")
        #expect(again.redelivered)
        second.ack(again)
        try await Task.sleep(for: .milliseconds(300))
        await second.close()
        try await publisher.deleteQueue(queue)
        await publisher.shutdown()
    }

    @Test func publisherAndConsumerReconnectAfterBrokerRestart() async throws {
        let queue = "test.bridge.\(UUID().uuidString)"
        let durable = AMQPTopology(queues: [.init(name: queue, arguments: ["x-queue-type": .string("quorum")])])
        let broker = try OutageProxy(for: TestEnvironment.amqpURL!)
        defer { broker.close() }
        let endpoint = try #require(AMQPEndpoint(url: broker.routing(TestEnvironment.amqpURL!)))
        let publisher = AMQPPublisher(endpoint: endpoint, topology: durable, logger: TestEnvironment.logger)
        let consumer = AMQPConsumer(
            configuration: .init(endpoint: endpoint, topology: durable, queue: queue, prefetch: 5),
            logger: TestEnvironment.logger)
        consumer.start()
        // A quorum queue can refuse messages for a moment right after it is declared.
        try await eventually(within: 15, "a publish") { try await publisher.publish([message(queue, "before")]); return true }
        let before = try #require(await next(consumer))
        consumer.ack(before)

        broker.cut()
        try await Task.sleep(for: .seconds(1))
        await #expect(throws: (any Error).self) { try await publisher.publish([message(queue, "while down")]) }
        try broker.restore()

        try await eventually(within: 30, "a publish after the restart") { try await publisher.publish([message(queue, "after")]); return true }
        // Whatever else is redelivered first (an unacked "before" copy) is acked on the way.
        var after = try #require(await next(consumer, within: 30))
        while String(decoding: after.body, as: UTF8.self) != "after" {
            consumer.ack(after)
            after = try #require(await next(consumer, within: 30))
        }
        consumer.ack(after)
        #expect(consumer.isConnected)
        try await Task.sleep(for: .milliseconds(300))
        await consumer.close()
        try await publisher.deleteQueue(queue)
        await publisher.shutdown()
    }
}
