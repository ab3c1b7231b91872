import Foundation
import Logging

/// One JSON object per line (`LOG_FORMAT=json`), for log shippers: `time` (RFC 3339, UTC,
/// milliseconds), `level`, `logger`, `message`, then the metadata's keys (`trace.id` among
/// them, inside a trace).
public enum JSONLogLine {
    /// One line, its newline included.
    public static func line(level: Logger.Level, label: String, fields: Logger.Metadata, message: String) -> String {
        var line = "{\"time\":\(quoted(now())),\"level\":\(quoted(level.rawValue))"
        line += ",\"logger\":\(quoted(label)),\"message\":\(quoted(message))"
        for key in fields.keys.sorted() where !["time", "level", "logger", "message"].contains(key) {
            line += ",\(quoted(key)):\(json(fields[key]!))"
        }
        return line + "}\n"
    }

    public static func json(_ value: Logger.Metadata.Value) -> String {
        switch value {
        case .string(let text): quoted(text)
        case .stringConvertible(let value): quoted(value.description)
        case .array(let values): "[" + values.map(json).joined(separator: ",") + "]"
        case .dictionary(let fields): "{" + fields.keys.sorted().map { "\(quoted($0)):\(json(fields[$0]!))" }.joined(separator: ",") + "}"
        }
    }

    /// `text` as a JSON string.
    static func quoted(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20: out += String(format: "\\u%04x", scalar.value)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    private static func now() -> String {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        var seconds = time.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        return String(
            format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
            parts.tm_hour, parts.tm_min, parts.tm_sec, time.tv_nsec / 1_000_000)
    }
}
