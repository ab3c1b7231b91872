import Foundation
import Logging

/// The services' log handler: one line per event on standard error, as readable text
/// (`TextLogLine`) or JSON (`JSONLogLine`) by `LOG_FORMAT`, with the handler's metadata,
/// the provider's (`trace.id`) and the event's own.
public struct LineLogHandler: LogHandler {
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    private let label: String
    private let format: Observability.LogFormat

    public init(label: String, format: Observability.LogFormat, metadataProvider: Logger.MetadataProvider? = nil) {
        self.label = label
        self.format = format
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
        let message = event.message.description
        let line = switch format {
        case .text: TextLogLine.line(time: TextLogLine.now(), level: event.level, label: label, fields: fields, source: event.source, message: message)
        case .json: JSONLogLine.line(level: event.level, label: label, fields: fields, message: message)
        }
        FileHandle.standardError.write(Data(line.utf8))
    }
}
