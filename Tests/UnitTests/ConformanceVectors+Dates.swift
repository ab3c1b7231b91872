import Foundation
import SyncModels
@testable import SynclineClient

/// Dates in record data: how a client writes one (UTC, milliseconds, as JavaScript's
/// `toISOString()` does) and the instant it reads from any ISO 8601 date-time.
extension ConformanceVectors {
    static let writtenDates: [Int64] = [0, 1_763_800_000_123, -1, 951_782_400_000, 253_402_300_799_999, 1_763_800_000_999]
    static let readDates = [
        "2026-11-22T10:00:00Z", "2026-11-22T10:00:00.5+01:00", "2026-11-22T10:00:00.123456Z", "2026-11-22T10:00:00-05:30",
        "1969-12-31T23:59:59.999Z", "2024-02-29T23:59:59.1239Z",
    ]

    /// Texts as a device shows them in record data: a date-time in UTC with milliseconds,
    /// anything else as it is (impossible dates, offsets past ±15:59, years out of range,
    /// near misses).
    static let shownDates = [
        "2026-11-22T10:00:00+01:00", "2026-11-22T10:00:00Z", "2026-11-22t10:00:00.5z", "2026-11-22 10:00:00.123456-05:30",
        "2026-11-22T09:00:00.000Z", "0001-01-01T00:30:00+01:00", "9999-12-31T23:30:00-01:00", "2024-02-29T12:00:00Z",
        "2026-02-29T12:00:00Z", "2026-13-01T00:00:00Z", "2026-11-22T24:00:00Z", "2026-11-22T10:00:00+16:00",
        "2026-11-22T10:00:00", "2026-11-22T10:00Z", "2026-11-22T10:00:00.Z", "2026-11-22T10:00:00.1234567890Z",
        "0000-01-01T00:00:00Z", "Soup, 2026-11-22T10:00:00Z", "2026-11-22T10:00:00+01:00 ",
    ]

    static var dateVectors: JSONValue {
        .array(writtenDates.map { ms in
            ["write": .int(ms), "expect": .string(RFC3339.string(from: Date(timeIntervalSince1970: Double(ms) / 1000)))]
        } + readDates.map { text in
            ["read": .string(text), "expect": RFC3339.date(from: text).map { .int(Int64(($0.timeIntervalSince1970 * 1000).rounded())) } ?? .null]
        } + shownDates.map { text in
            ["show": .string(text), "expect": LocalMerge.datesInUTC(.string(text))]
        })
    }
}
