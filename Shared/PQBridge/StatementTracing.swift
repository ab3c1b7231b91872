import Foundation
import Logging
import Tracing

/// What a connection does around each statement of the caller holding it: a database
/// client span in the caller's trace (when a tracer is bootstrapped), and one warning
/// when the statement takes longer than `slow`. Spans name the statement by its
/// operation and table, and carry its text, whose values are all `$n` parameters
/// (`PGQuery`): never a value.
struct StatementTracing: Sendable {
    /// The pool's tracer, when tracing is on and the holder's trace is sampled (the pool
    /// decides): spans of an unsampled trace would be dropped, so they are not made (that was
    /// half of what tracing at 1 % cost the worker).
    let tracer: (any Tracer)?
    /// The holder's context: statements run on a pool thread, which has no task-locals.
    let context: ServiceContext?
    let logger: Logger
    let slow: Duration

    /// Whether `context`'s trace is sampled, asked of the tracer: the flags of the
    /// `traceparent` it would send on.
    static func isSampled(_ context: ServiceContext, by tracer: any Tracer) -> Bool {
        var carrier: [String: String] = [:]
        tracer.inject(context, into: &carrier, using: TraceparentInjector())
        guard let flags = carrier["traceparent"]?.split(separator: "-").last, let value = UInt8(flags, radix: 16) else { return false }
        return value & 1 == 1
    }

    func start(_ query: PGQuery) -> (any Span)? {
        guard let tracer, let context else { return nil }
        let summary = query.summary
        let span = tracer.startSpan(summary, context: context, ofKind: .client)
        guard span.isRecording else { return span }
        span.attributes["db.system.name"] = "postgresql"
        span.attributes["db.query.summary"] = summary
        span.attributes["db.query.text"] = query.sql
        span.attributes["db.operation.name"] = String(summary.prefix { $0 != " " })
        return span
    }

    func end(_ span: (any Span)?, _ query: PGQuery, started: ContinuousClock.Instant, error: PGError?) {
        if let span {
            if let error {
                if let state = error.sqlState { span.attributes["db.response.status_code"] = state }
                span.attributes["error.type"] = "\(error.code)"
                span.setStatus(SpanStatus(code: .error))
            }
            span.end()
        }
        let took = ContinuousClock.now - started
        guard took > slow else { return }
        let log = {
            logger.warning("slow statement", metadata: [
                "db.query.summary": "\(query.summary)", "seconds": "\(took.seconds)",
            ])
        }
        if let context { ServiceContext.withValue(context, operation: log) } else { log() }
    }
}

extension PGQuery {
    /// The operation and the table it acts on (`SELECT jobs`, `INSERT devices`, `BEGIN`),
    /// read outside parentheses, past a `WITH`'s common table expressions: a statement's
    /// name, low in cardinality. Read from the bytes (SQL keywords are ASCII): it runs for
    /// every statement while tracing is on.
    public var summary: String {
        let bytes = Array(sql.utf8)
        // Words outside any parentheses, as byte ranges.
        var words: [Range<Int>] = []
        var depth = 0
        var wordStart: Int?
        for (index, byte) in bytes.enumerated() {
            let inWord = (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ".") || byte >= 0x80
            if inWord {
                if wordStart == nil { wordStart = index }
                continue
            }
            if let start = wordStart {
                if depth == 0 { words.append(start..<index) }
                wordStart = nil
            }
            if byte == UInt8(ascii: "(") { depth += 1 } else if byte == UInt8(ascii: ")") { depth = max(0, depth - 1) }
        }
        if let start = wordStart, depth == 0 { words.append(start..<bytes.count) }
        /// Whether word `index` is `keyword` (upper case), in any case.
        func word(_ index: Int, is keyword: StaticString) -> Bool {
            let range = words[index]
            guard range.count == keyword.utf8CodeUnitCount else { return false }
            return keyword.withUTF8Buffer { key in
                zip(bytes[range], key).allSatisfy { byte, letter in (byte & 0xDF) == letter }
            }
        }
        func text(_ index: Int) -> String { String(decoding: bytes[words[index]], as: UTF8.self) }
        guard !words.isEmpty else { return "" }
        var verb = 0
        if word(0, is: "WITH"),
           let main = words.indices.first(where: { word($0, is: "SELECT") || word($0, is: "INSERT") || word($0, is: "UPDATE") || word($0, is: "DELETE") }) {
            verb = main
        }
        let operation = text(verb).uppercased()
        let marker: StaticString? = switch operation {
        case "SELECT", "DELETE": "FROM"
        case "INSERT": "INTO"
        case "UPDATE": "UPDATE"
        default: nil
        }
        guard let marker, let found = words.indices[verb...].first(where: { word($0, is: marker) }), found + 1 < words.count else {
            return operation
        }
        var target = found + 1
        while target + 1 < words.count, word(target, is: "ONLY") || word(target, is: "LATERAL") { target += 1 }
        return "\(operation) \(text(target))"
    }
}

private struct TraceparentInjector: Injector {
    func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) { carrier[key] = value }
}
