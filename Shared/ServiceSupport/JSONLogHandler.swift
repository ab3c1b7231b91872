import Foundation
import Logging

/// One JSON object per line on standard error (`LOG_FORMAT=json`), for log shippers:
/// `time` (RFC 3339, UTC, milliseconds), `level`, `logger`, `message`, then the metadata's
/// keys (`trace.id` among them, inside a trace).
public struct JSONLogHandler: LogHandler {
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    private let label: String

    public init(label: String, metadataProvider: Logger.MetadataProvider? = nil) {
        self.label = label
        self.metadataProvider = metadataProvider
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var fields = metadata
        if let provided = metadataProvider?.get() { fields.merge(provided) { $1 } }
        if let own = event.metadata { fields.merge(own) { $1 } }
        var line = "{\"time\":\(Self.quoted(Self.now())),\"level\":\(Self.quoted(event.level.rawValue))"
        line += ",\"logger\":\(Self.quoted(label)),\"message\":\(Self.quoted(event.message.description))"
        for key in fields.keys.sorted() where !["time", "level", "logger", "message"].contains(key) {
            line += ",\(Self.quoted(key)):\(Self.json(fields[key]!))"
        }
        line += "}\n"
        FileHandle.standardError.write(Data(line.utf8))
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
