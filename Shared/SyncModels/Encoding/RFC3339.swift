import Foundation

/// Strict RFC 3339 date-times (`2026-11-22T10:00:00Z`, `…T10:00:00.5+01:00`), for filters
/// that reach PostgreSQL: an impossible date (February 30), an offset beyond ±15:59 or a
/// year outside 1–9999 is refused here, where a lenient parser would roll it over and
/// PostgreSQL would then fail the request.
public enum RFC3339 {
    /// The same instant in UTC with milliseconds, e.g. `2026-11-22T09:00:00.000Z`, or nil.
    public static func canonicalUTC(_ text: String) -> String? {
        guard let (parsed, parsedMilliseconds) = parse(text) else { return nil }
        // An offset can carry 0001-01-01 or 9999-12-31 across a year boundary: such an
        // instant is clamped to the first or last one PostgreSQL stores (a filter means
        // the same either way).
        let first = daysFromCivil(year: 1, month: 1, day: 1) * 86_400
        let last = daysFromCivil(year: 9999, month: 12, day: 31) * 86_400 + 86_399
        let (seconds, milliseconds) = parsed < first ? (first, 0) : parsed > last ? (last, 999) : (parsed, parsedMilliseconds)
        return format(seconds: seconds, milliseconds: milliseconds)
    }

    /// A time PostgreSQL gave as `extract(epoch FROM t)` (`1763876841.123456`), as
    /// `2026-11-23T05:47:21.123Z` — what `to_char` would make of it, milliseconds truncated
    /// like `to_char`'s `MS`, and much cheaper for PostgreSQL than `to_char`. Nil if `epoch`
    /// is not such a number.
    public static func utc(epoch: String) -> String? {
        // Read byte by byte: a pull formats two of these per record.
        var negative = false, seconds: Int64 = 0, microseconds: Int64 = 0
        var wholeDigits = 0, fractionDigits = 0, inFraction = false
        for (offset, byte) in epoch.utf8.enumerated() {
            switch byte {
            case UInt8(ascii: "-") where offset == 0: negative = true
            case UInt8(ascii: ".") where !inFraction && wholeDigits > 0: inFraction = true
            case 48...57 where inFraction:
                fractionDigits += 1
                guard fractionDigits <= 6 else { return nil }
                microseconds = microseconds * 10 + Int64(byte - 48)
            case 48...57:
                wholeDigits += 1
                guard wholeDigits <= 12 else { return nil }
                seconds = seconds * 10 + Int64(byte - 48)
            default: return nil
            }
        }
        guard wholeDigits > 0, !inFraction || fractionDigits > 0 else { return nil }
        for _ in fractionDigits..<6 { microseconds *= 10 }
        // `-1.5` is 1.5 s before 1970: the fraction counts away from zero.
        return utc(unixMicroseconds: (seconds * 1_000_000 + microseconds) * (negative ? -1 : 1))
    }

    /// A date as record data holds it: UTC with milliseconds (`2026-11-23T05:47:21.123Z`), as
    /// JavaScript's `toISOString()` writes it, the instant rounded to the millisecond.
    public static func string(from date: Date) -> String {
        utc(unixMicroseconds: Int64((date.timeIntervalSince1970 * 1000).rounded()) * 1000)
    }

    /// A date-time in record data (any offset, any number of fraction digits, read to the
    /// millisecond), or nil.
    public static func date(from text: String) -> Date? {
        guard let (seconds, milliseconds) = parse(text) else { return nil }
        return Date(timeIntervalSince1970: Double(seconds * 1000 + milliseconds) / 1000)
    }

    /// A time as microseconds since 1970, as `2026-11-23T05:47:21.123Z` (milliseconds
    /// truncated toward the past, like `to_char`'s `MS`).
    public static func utc(unixMicroseconds: Int64) -> String {
        var bytes: [UInt8] = []
        write(unixMicroseconds: unixMicroseconds, into: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Appends what `utc(unixMicroseconds:)` answers, as bytes (a pull writes two per record).
    public static func write(unixMicroseconds: Int64, into out: inout [UInt8]) {
        let milliseconds = floorDiv(unixMicroseconds, 1_000)
        write(seconds: floorDiv(milliseconds, 1_000), milliseconds: milliseconds - floorDiv(milliseconds, 1_000) * 1_000, into: &out)
    }

    /// `YYYY-MM-DDTHH:MM:SS.mmmZ` for a year 0–9999.
    static func format(seconds: Int64, milliseconds: Int64) -> String {
        var bytes: [UInt8] = []
        write(seconds: seconds, milliseconds: milliseconds, into: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func write(seconds: Int64, milliseconds: Int64, into out: inout [UInt8]) {
        let days = floorDiv(seconds, 86_400)
        let (year, month, day) = civil(fromDays: days)
        let secondOfDay = seconds - days * 86_400
        let start = out.count
        out.append(contentsOf: template)
        func put(_ value: Int64, at offset: Int, width: Int) {
            var value = value
            for index in stride(from: start + offset + width - 1, through: start + offset, by: -1) {
                out[index] = UInt8(48 + value % 10)
                value /= 10
            }
        }
        put(year, at: 0, width: 4)
        put(month, at: 5, width: 2)
        put(day, at: 8, width: 2)
        put(secondOfDay / 3600, at: 11, width: 2)
        put(secondOfDay / 60 % 60, at: 14, width: 2)
        put(secondOfDay % 60, at: 17, width: 2)
        put(milliseconds, at: 20, width: 3)
    }

    /// The separators `format` fills the digits in between.
    private static let template = Array("0000-00-00T00:00:00.000Z".utf8)

    /// Seconds since 1970 (UTC) and milliseconds, or nil if `text` is not a valid date-time.
    static func parse(_ text: String) -> (Int64, Int64)? {
        let b = Array(text.utf8)
        guard b.count >= 20 else { return nil }
        func number(_ range: Range<Int>) -> Int64? {
            guard range.upperBound <= b.count else { return nil }
            var value: Int64 = 0
            for i in range {
                guard (48...57).contains(b[i]) else { return nil }
                value = value * 10 + Int64(b[i] - 48)
            }
            return value
        }
        guard let year = number(0..<4), b[4] == UInt8(ascii: "-"), let month = number(5..<7), b[7] == UInt8(ascii: "-"),
              let day = number(8..<10), [UInt8(ascii: "T"), UInt8(ascii: "t"), UInt8(ascii: " ")].contains(b[10]),
              let hour = number(11..<13), b[13] == UInt8(ascii: ":"), let minute = number(14..<16),
              b[16] == UInt8(ascii: ":"), let second = number(17..<19)
        else { return nil }
        guard (1...9999).contains(year), (1...12).contains(month), (1...daysIn(month: month, year: year)).contains(day),
              hour < 24, minute < 60, second < 60
        else { return nil }
        var index = 19
        var milliseconds: Int64 = 0
        if b[index] == UInt8(ascii: ".") {
            index += 1
            let start = index
            while index < b.count, (48...57).contains(b[index]) { index += 1 }
            guard index > start, index - start <= 9 else { return nil }
            let digits = b[start..<min(index, start + 3)].map { Int64($0 - 48) }
            milliseconds = digits.enumerated().reduce(0) { $0 + $1.element * [100, 10, 1][$1.offset] }
        }
        guard index < b.count else { return nil }
        var offset: Int64 = 0
        switch b[index] {
        case UInt8(ascii: "Z"), UInt8(ascii: "z"):
            guard index + 1 == b.count else { return nil }
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            guard index + 6 == b.count, let hours = number(index + 1..<index + 3), b[index + 3] == UInt8(ascii: ":"),
                  let minutes = number(index + 4..<index + 6), hours <= 15, minutes < 60
            else { return nil }
            offset = (hours * 60 + minutes) * 60 * (b[index] == UInt8(ascii: "-") ? -1 : 1)
        default:
            return nil
        }
        let days = daysFromCivil(year: year, month: month, day: day)
        return (days * 86_400 + hour * 3600 + minute * 60 + second - offset, milliseconds)
    }

    static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    private static func floorDiv(_ a: Int64, _ b: Int64) -> Int64 { a >= 0 ? a / b : -((-a + b - 1) / b) }

    /// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
    static func daysFromCivil(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = floorDiv(y, 400)
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    static func civil(fromDays days: Int64) -> (Int64, Int64, Int64) {
        let z = days + 719_468
        let era = floorDiv(z, 146_097)
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
