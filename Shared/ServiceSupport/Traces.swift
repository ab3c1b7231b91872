import AMQPBridge
import Foundation
import NIOConcurrencyHelpers
import SyncModels
import Tracing

/// W3C trace context across Syncline's hops: HTTP headers, message headers, job rows and
/// log lines. With tracing on (`Telemetry`), spans are recorded and exported; with it off,
/// the same `traceparent` still travels, so that logs of one push share one trace id.
public enum Traces {
    /// The tracer `Telemetry` bootstrapped, or nil: tracing is off and no span is started.
    /// (Kept here rather than asked of `InstrumentationSystem` on every request: that
    /// lookup, a task-local read, a lock and a cast, was 1.8 % of the gateway's CPU.)
    public static var tracer: (any Tracer)? { bootstrapped.withLockedValue { $0 } }
    private static let bootstrapped = NIOLockedValueBox<(any Tracer)?>(nil)

    /// Whether a tracer was bootstrapped: spans are worth starting.
    public static var enabled: Bool { tracer != nil }

    /// Called once `tracer` is bootstrapped as the `InstrumentationSystem`'s.
    public static func started(_ tracer: any Tracer) {
        bootstrapped.withLockedValue { $0 = tracer }
    }

    /// The `traceparent` of `context`: its span's, when tracing is on, else the one the
    /// request or message brought (`ServiceContext.traceparent`).
    public static func traceparent(of context: ServiceContext? = .current) -> String? {
        guard let context else { return nil }
        if enabled {
            var carrier: [String: String] = [:]
            InstrumentationSystem.instrument.inject(context, into: &carrier, using: DictionaryInjector())
            if let traceparent = carrier["traceparent"] { return traceparent }
        }
        return context.traceparent
    }

    /// Whether spans of `context`'s trace are recorded (its `traceparent`'s sampled flag).
    /// Spans are made only for such traces: an unsampled one's would be dropped anyway.
    public static func isSampled(_ context: ServiceContext) -> Bool {
        guard enabled, let flags = traceparent(of: context)?.split(separator: "-").last, let value = UInt8(flags, radix: 16)
        else { return false }
        return value & 1 == 1
    }

    /// The trace id (32 hex digits) within a `traceparent`.
    public static func traceID(of traceparent: String?) -> String? {
        guard let traceparent, TraceParent.isValid(traceparent) else { return nil }
        return String(traceparent.split(separator: "-")[1])
    }

    /// The context a remote caller or a message carried in `traceparent` (and
    /// `tracestate`): the parent of the spans that handle it. An invalid or missing one
    /// starts a new trace.
    public static func context(traceparent: String?, tracestate: String? = nil) -> ServiceContext {
        var context = ServiceContext.topLevel
        let valid = traceparent.map { $0.lowercased() }.flatMap { TraceParent.isValid($0) ? $0 : nil }
        if enabled, let valid {
            var carrier = ["traceparent": valid]
            if let tracestate { carrier["tracestate"] = tracestate }
            InstrumentationSystem.instrument.extract(carrier, into: &context, using: DictionaryExtractor())
        }
        context.traceparent = valid ?? TraceParent.random()
        return context
    }

    /// The context a message was published in (its `traceparent` header).
    public static func context(of delivery: AMQPDelivery) -> ServiceContext {
        context(traceparent: delivery.header("traceparent"), tracestate: delivery.header("tracestate"))
    }

    /// Runs `body` for work that serves several traced requests at once (a group commit, a
    /// batch of jobs applied in one transaction). One member: a span in its trace. More: a
    /// span of its own trace, linked to every member, and in each member's trace a span
    /// linked back to it — so every request's trace shows the batch it rode in. `body` is
    /// given each member's context within the batch, for what it sends on per member.
    public static func batch<T>(
        _ name: String, members: [ServiceContext], kind: SpanKind = .internal, attributes: SpanAttributes = [:],
        _ body: ([ServiceContext]) async throws -> T
    ) async rethrows -> T {
        guard let tracer, members.contains(where: isSampled) else {
            // Each member keeps its own context; the batch's log lines are the first's.
            return try await ServiceContext.withValue(members.first ?? .current ?? .topLevel) { try await body(members) }
        }
        guard members.count > 1 else {
            let context = members[0]
            return try await ServiceContext.withValue(context) {
                try await tracer.withSpan(name, context: context, ofKind: kind) { span in
                    span.attributes.merge(attributes)
                    var inner = span.context
                    inner.traceparent = traceparent(of: span.context) ?? context.traceparent
                    return try await ServiceContext.withValue(inner) { try await body([inner]) }
                }
            }
        }
        var batchContext = ServiceContext.topLevel
        batchContext.traceparent = TraceParent.random()
        let batch = tracer.startSpan(name, context: batchContext, ofKind: kind)
        batch.attributes.merge(attributes)
        batch.attributes["syncline.batch.size"] = members.count
        var memberSpans: [any Span] = []
        for member in members {
            batch.addLink(SpanLink(context: member, attributes: [:]))
            let span = tracer.startSpan(name, context: member, ofKind: kind)
            span.attributes.merge(attributes)
            span.attributes["syncline.batch.size"] = members.count
            span.addLink(SpanLink(context: batch.context, attributes: [:]))
            memberSpans.append(span)
        }
        defer {
            batch.end()
            memberSpans.forEach { $0.end() }
        }
        let memberContexts = memberSpans.map { span in
            var context = span.context
            context.traceparent = traceparent(of: span.context)
            return context
        }
        var context = batch.context
        context.traceparent = traceparent(of: batch.context)
        return try await ServiceContext.withValue(context) {
            do {
                return try await body(memberContexts)
            } catch {
                batch.recordError(error)
                batch.setStatus(SpanStatus(code: .error))
                throw error
            }
        }
    }

    /// Publishes `messages`, each in a producer span of the context it goes with, and with
    /// that span's `traceparent` in its headers (or the context's own, with tracing off).
    public static func publish(
        _ messages: [(message: OutgoingMessage, context: ServiceContext)], with publisher: AMQPPublisher
    ) async throws {
        guard let tracer, messages.contains(where: { isSampled($0.context) }) else {
            try await publisher.publish(messages.map { message, context in
                var message = message
                if let traceparent = traceparent(of: context) { message.headers["traceparent"] = .string(traceparent) }
                return message
            })
            return
        }
        var spans: [any Span] = []
        var outgoing: [OutgoingMessage] = []
        for (message, context) in messages {
            let destination = message.exchange.isEmpty ? message.routingKey : message.exchange
            let span = tracer.startSpan("publish \(destination)", context: context, ofKind: .producer)
            span.attributes["messaging.system"] = "rabbitmq"
            span.attributes["messaging.operation.type"] = "send"
            span.attributes["messaging.destination.name"] = destination
            span.attributes["messaging.rabbitmq.destination.routing_key"] = message.routingKey
            if let id = message.messageID { span.attributes["messaging.message.id"] = id }
            var message = message
            var carrier: [String: String] = [:]
            InstrumentationSystem.instrument.inject(span.context, into: &carrier, using: DictionaryInjector())
            for (name, value) in carrier { message.headers[name] = .string(value) }
            spans.append(span)
            outgoing.append(message)
        }
        defer { spans.forEach { $0.end() } }
        do {
            try await publisher.publish(outgoing)
        } catch {
            for span in spans {
                span.recordError(error)
                span.setStatus(SpanStatus(code: .error))
            }
            throw error
        }
    }
}

/// `traceparent` values: `00-<trace id>-<parent id>-<flags>`, lowercase hex.
public enum TraceParent {
    public static func isValid(_ value: String) -> Bool {
        let parts = value.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0].count == 2, parts[0] != "ff", parts[1].count == 32, parts[2].count == 16,
              parts[3].count == 2 else { return false }
        let hex = { (part: Substring) in part.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) } }
        return parts.allSatisfy(hex) && parts[1] != String(repeating: "0", count: 32)
            && parts[2] != String(repeating: "0", count: 16)
    }

    /// A new trace's `traceparent`, sampled.
    public static func random() -> String {
        // 24 random bytes in one call, not one draw per byte: each draw may be a system
        // call, and `String(format:)` per byte was 7 % of the gateway's CPU.
        var bytes = [UInt8](repeating: 0, count: 24)
        bytes.withUnsafeMutableBytes { arc4random_buf($0.baseAddress!, $0.count) }
        return "00-\(Hex.string(bytes[0..<16]))-\(Hex.string(bytes[16..<24]))-01"
    }
}

extension ServiceContext {
    private enum TraceparentKey: ServiceContextKey {
        typealias Value = String
        static let nameOverride: String? = "traceparent"
    }

    /// The W3C `traceparent` this work belongs to, whether or not spans are recorded: what
    /// log lines name as `trace.id`, and what a job row keeps for its later messages.
    public var traceparent: String? {
        get { self[TraceparentKey.self] }
        set { self[TraceparentKey.self] = newValue }
    }
}

struct DictionaryInjector: Injector {
    func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) { carrier[key] = value }
}

struct DictionaryExtractor: Extractor {
    func extract(key: String, from carrier: [String: String]) -> String? { carrier[key] }
}
