import Foundation
import Logging
import Tracing

/// What a connection does around each statement of the caller holding it: a database
/// client span in the caller's trace (when a tracer is bootstrapped), and one warning
/// when the statement takes longer than `slow`. Spans name the statement by its
/// operation and table, and carry its text, whose values are all `$n` parameters
/// (`PGQuery`): never a value.
struct StatementTracing: Sendable {
    /// The holder's context: statements run on a pool thread, which has no task-locals.
    let context: ServiceContext?
    let logger: Logger
    let slow: Duration

    func start(_ query: PGQuery) -> (any Span)? {
        let tracer = InstrumentationSystem.tracer
        guard !(tracer is NoOpTracer), let context else { return nil }
        let summary = query.summary
        let span = tracer.startSpan(summary, context: context, ofKind: .client)
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
    /// name, low in cardinality.
    public var summary: String {
        // Words outside any parentheses.
        var words: [Substring] = []
        var depth = 0
        var wordStart: String.Index?
        for index in sql.indices {
            let character = sql[index]
            let isWordCharacter = character.isLetter || character.isNumber || character == "_" || character == "."
            if isWordCharacter, wordStart == nil { wordStart = index }
            if !isWordCharacter, let start = wordStart {
                if depth == 0 { words.append(sql[start..<index]) }
                wordStart = nil
            }
            if character == "(" { depth += 1 } else if character == ")" { depth = max(0, depth - 1) }
        }
        if let start = wordStart, depth == 0 { words.append(sql[start...]) }
        let upper = words.map { $0.uppercased() }
        guard var verb = upper.first else { return "" }
        var at = 0
        if verb == "WITH", let main = upper.firstIndex(where: { ["SELECT", "INSERT", "UPDATE", "DELETE"].contains($0) }) {
            verb = upper[main]
            at = main
        }
        let marker: String? = switch verb {
        case "SELECT", "DELETE": "FROM"
        case "INSERT": "INTO"
        case "UPDATE": "UPDATE"
        default: nil
        }
        guard let marker, let found = upper[at...].firstIndex(of: marker), found + 1 < words.count else { return verb }
        var target = found + 1
        while target + 1 < words.count, ["ONLY", "LATERAL"].contains(upper[target]) { target += 1 }
        return "\(verb) \(words[target])"
    }
}
