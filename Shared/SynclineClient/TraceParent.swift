import Foundation

/// The W3C `traceparent` a push is sent with, so that the server's spans and log lines of
/// it join one trace the app can name. The trace id is the batch's idempotency key (a
/// UUID, so every retry of the batch is in the same trace); each attempt is a span of its own.
struct TraceParent: Sendable {
    let traceID: String
    let header: String

    init(batchKey: String) {
        let hex = batchKey.lowercased().filter(\.isHexDigit)
        traceID = hex.count == 32 && hex != String(repeating: "0", count: 32)
            ? hex : (0..<4).map { _ in String(format: "%08x", UInt32.random(in: .min ... .max)) }.joined()
        let spanID = String(format: "%016llx", UInt64.random(in: 1 ... .max))
        header = "00-\(traceID)-\(spanID)-01"
    }
}
