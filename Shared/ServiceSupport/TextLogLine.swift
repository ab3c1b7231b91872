import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Readable lines (`LOG_FORMAT=text`, the default), as swift-log's `StreamLogHandler`
/// writes them — `<time> <level> <logger>: key=value … [<source>] <message>` — but with every
/// value escaped: a value that holds a space, `=`, a quote or a control character is
/// written quoted, and the message's control characters are escaped. A value a client
/// chose (a user claim, a path) can then neither add fields nor start a line.
public enum TextLogLine {
    /// One line, its newline included.
    public static func line(
        time: String, level: Logger.Level, label: String, fields: Logger.Metadata, source: String, message: String
    ) -> String {
        var line = "\(time) \(level) \(label):"
        for key in fields.keys.sorted() {
            line += " \(escaped(key, quoting: false))=\(value(fields[key]!))"
        }
        return line + " [\(source)] \(escaped(message, quoting: false))\n"
    }

    static func value(_ value: Logger.Metadata.Value) -> String {
        switch value {
        case .string(let text): escaped(text, quoting: true)
        case .stringConvertible(let value): escaped(value.description, quoting: true)
        case .array, .dictionary: escaped(value.description, quoting: true)
        }
    }

    /// `text` with its control characters escaped; quoted (with `"` and `\` escaped) when
    /// `quoting` and it is empty or holds a space, `=` or a quote.
    static func escaped(_ text: String, quoting: Bool) -> String {
        let needsQuotes = quoting && (text.isEmpty || text.unicodeScalars.contains { $0 == " " || $0 == "=" || $0 == "\"" })
        let needsEscapes = text.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F || (needsQuotes && $0 == "\\") }
        guard needsQuotes || needsEscapes else { return text }
        var out = needsQuotes ? "\"" : ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"" where needsQuotes: out += "\\\""
            case "\\" where needsQuotes: out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F: out += String(format: "\\u%04x", scalar.value)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return needsQuotes ? out + "\"" : out
    }

    /// Local time as `StreamLogHandler` writes it: `2026-11-28T17:05:33+0000`.
    static func now() -> String {
        var timestamp = time(nil)
        var local = tm()
        guard localtime_r(&timestamp, &local) != nil else { return "-" }
        var buffer = [Int8](repeating: 0, count: 64)
        let length = strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%S%z", &local)
        return String(decoding: buffer.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
