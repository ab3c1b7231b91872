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
    public static var tracer: (any Tracer)? { bootstrapped.withLockedValue { $0.tracer } }
    private static let bootstrapped = NIOLockedValueBox<(tracer: (any Tracer)?, requestSampleRatio: Double)>((nil, 1))

    /// Whether a tracer was bootstrapped: spans are worth starting.
    public static var enabled: Bool { tracer != nil }

    /// Called once `tracer` is bootstrapped as the `InstrumentationSystem`'s, with the share
    /// of requests to sample (`requestContext`).
    public static func started(_ tracer: any Tracer, requestSampleRatio: Double) {
        bootstrapped.withLockedValue { $0 = (tracer, min(max(requestSampleRatio, 0), 1)) }
    }

    /// The `traceparent` of `context`: the one its work belongs to (`ServiceContext.traceparent`),
    /// which every context made from a span carries (`context(of:)`), sampled or not.
    public static func traceparent(of context: ServiceContext? = .current) -> String? {
        context?.traceparent
    }

    /// A span's context, carrying the span's own `traceparent` (its trace, its id, whether
    /// it is sampled): what its work logs and sends on.
    public static func context(of span: any Span) -> ServiceContext {
        var context = span.context
        if let tracer {
            var carrier: [String: String] = [:]
            tracer.inject(span.context, into: &carrier, using: DictionaryInjector())
            if let traceparent = carrier["traceparent"] { context.traceparent = traceparent }
        }
        return context
    }

    /// Whether spans of `context`'s trace are recorded (its `traceparent`'s sampled flag).
    /// Spans are made only for such traces: an unsampled one's would be dropped anyway.
    public static func isSampled(_ context: ServiceContext) -> Bool {
        guard enabled, let traceparent = context.traceparent else { return false }
        return TraceParent.isSampled(traceparent)
    }

    /// The trace id (32 hex digits) within a `traceparent`.
    public static func traceID(of traceparent: String?) -> String? {
        guard let traceparent, TraceParent.isValid(traceparent) else { return nil }
        return String(traceparent.utf8.dropFirst(3).prefix(32))!
    }

    /// The context a remote caller or a message carried in `traceparent` (and
    /// `tracestate`): the parent of the spans that handle it. An invalid or missing one
    /// starts a new trace.
    /// The longest `tracestate` carried on (W3C Trace Context's limit for propagation).
    public static let maxTracestate = 512

    public static func context(traceparent: String?, tracestate: String? = nil) -> ServiceContext {
        let valid = traceparent.flatMap(TraceParent.normalized)
        var context = ServiceContext.topLevel
        if let tracer, let valid {
            var carrier = ["traceparent": valid]
            // One longer than W3C's 512 characters is dropped, not carried into every span
            // and message of the trace.
            if let tracestate, tracestate.utf8.count <= Self.maxTracestate { carrier["tracestate"] = tracestate }
            tracer.extract(carrier, into: &context, using: DictionaryExtractor())
        }
        context.traceparent = valid ?? TraceParent.random()
        return context
    }

    /// The context of an HTTP request: its `traceparent` names the trace (a device sends
    /// its push's), but whether the trace is sampled is this service's decision, by its
    /// share of requests to sample — a device cannot know that share, and one that always
    /// asked for sampling, or chose ids a rule on the id would pick, would have every push
    /// traced.
    public static func requestContext(traceparent: String?, tracestate: String? = nil) -> ServiceContext {
        let (tracer, ratio) = bootstrapped.withLockedValue { $0 }
        guard let valid = traceparent.flatMap(TraceParent.normalized) else {
            // With a tracer, a new trace is the request span's (`context(of:)`); without, it starts here.
            return tracer == nil ? context(traceparent: nil) : .topLevel
        }
        return context(traceparent: TraceParent.sampled(valid, ratio: ratio), tracestate: tracestate)
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
                    let inner = Self.context(of: span)
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
        let memberContexts = memberSpans.map(Self.context(of:))
        return try await ServiceContext.withValue(Self.context(of: batch)) {
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
                if let traceparent = context.traceparent { message.headers["traceparent"] = .string(traceparent) }
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
            tracer.inject(span.context, into: &carrier, using: DictionaryInjector())
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
    /// Whether `value` is a `traceparent`: version 00's layout in lowercase hex, the ids not
    /// all zero. Read byte by byte, allocating nothing: it runs for every request, message
    /// and log line.
    public static func isValid(_ value: String) -> Bool {
        var index = 0, traceIDZero = true, parentIDZero = true, versionFF = true
        for byte in value.utf8 {
            defer { index += 1 }
            if index == 2 || index == 35 || index == 52 {
                guard byte == UInt8(ascii: "-") else { return false }
                continue
            }
            guard index < 55, (48...57).contains(byte) || (97...102).contains(byte) else { return false }
            if index < 2, byte != UInt8(ascii: "f") { versionFF = false }
            if byte != UInt8(ascii: "0") {
                if (3..<35).contains(index) { traceIDZero = false } else if (36..<52).contains(index) { parentIDZero = false }
            }
        }
        return index == 55 && !versionFF && !traceIDZero && !parentIDZero
    }

    /// `value` when it is a `traceparent`, or in lowercase when that one is; else nil.
    public static func normalized(_ value: String) -> String? {
        if isValid(value) { return value }
        let lowercase = value.lowercased()
        return lowercase != value && isValid(lowercase) ? lowercase : nil
    }

    /// Whether a valid `traceparent`'s flags say sampled (their lowest bit).
    public static func isSampled(_ traceparent: String) -> Bool {
        guard let last = traceparent.utf8.last, let digit = hexValue(last) else { return false }
        return digit & 1 == 1
    }

    /// A valid `traceparent` with its sampled flag set by `ratio`: a draw of this service's,
    /// never the trace id. (OpenTelemetry's trace-id ratio rule reads the id's last eight
    /// bytes, which a client chooses: one that sends ids ending in zeros would have every
    /// request traced.) Services after this one follow the flag it sets.
    public static func sampled(_ traceparent: String, ratio: Double) -> String {
        let sampled = ratio >= 1 || (ratio > 0 && Double.random(in: 0..<1) < ratio)
        return String(decoding: traceparent.utf8.prefix(53), as: UTF8.self) + (sampled ? "01" : "00")
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 48...57: byte - 48
        case 97...102: byte - 87
        case 65...70: byte - 55
        default: nil
        }
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
