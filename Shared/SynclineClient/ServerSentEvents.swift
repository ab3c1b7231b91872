import Foundation

/// Splits a Server-Sent Events byte stream into the `data` of each event.
struct ServerSentEvents: Sendable {
    private var buffer: [UInt8] = []

    /// Feeds bytes; returns the data of every event they complete.
    mutating func feed(_ bytes: some Sequence<UInt8>) -> [String] {
        buffer.append(contentsOf: bytes)
        var events: [String] = []
        while let end = Self.eventEnd(in: buffer) {
            // Lines by bytes: as a String, "\r\n" is one Character and would not split on "\n".
            let lines = buffer[..<end.start].split(separator: 10, omittingEmptySubsequences: false)
                .map { String(decoding: $0.last == 13 ? $0.dropLast() : $0, as: UTF8.self) }
            buffer.removeFirst(end.next)
            let data = lines.filter { $0.hasPrefix("data:") }.map { line -> Substring in
                let value = line.dropFirst(5)
                return value.hasPrefix(" ") ? value.dropFirst() : value
            }
            if !data.isEmpty { events.append(data.joined(separator: "\n")) }
        }
        return events
    }

    /// Where the first blank line (`\n\n` or `\r\n\r\n`) starts, and where what follows it does.
    private static func eventEnd(in bytes: [UInt8]) -> (start: Int, next: Int)? {
        var index = 0
        while index < bytes.count {
            if bytes[index] == 10 {
                if index + 1 < bytes.count, bytes[index + 1] == 10 { return (index, index + 2) }
                if index + 2 < bytes.count, bytes[index + 1] == 13, bytes[index + 2] == 10 { return (index, index + 3) }
            }
            index += 1
        }
        return nil
    }
}
