import PQBridge
import SyncModels

/// Where a page of a list ordered by time and id ends: `<microseconds since 1970>_<id>`,
/// the last item's exact time and id. Any text of that shape is a valid position (the
/// page after it), so a cursor is checked by its shape alone and never reaches PostgreSQL
/// as something it could refuse.
public struct PageCursor: Sendable, Equatable {
    public let atMicroseconds: Int64
    public let id: String

    public init?(text: String) {
        let parts = text.split(separator: "_", omittingEmptySubsequences: false)
        guard parts.count == 2, (1...16).contains(parts[0].utf8.count), parts[0].utf8.allSatisfy({ (48...57).contains($0) }),
              let microseconds = Int64(parts[0]), let id = Names.canonicalUUID(String(parts[1]))
        else { return nil }
        self.init(atMicroseconds: microseconds, id: id)
    }

    init(atMicroseconds: Int64, id: String) {
        self.atMicroseconds = atMicroseconds
        self.id = id
    }

    /// Where the page ends: its last item's time and id.
    init(_ time: PGTimestamp, id: String) {
        self.init(atMicroseconds: time.microseconds + PGTimestamp.unixOffset, id: id)
    }

    /// The time, for binding into the next page's query.
    var time: PGTimestamp { PGTimestamp(microsecondsSince2000: atMicroseconds - PGTimestamp.unixOffset) }

    public var text: String { "\(atMicroseconds)_\(id)" }
}
