import Foundation

/// Durations as configuration and queue names spell them.
public enum Durations {
    /// `500ms`, `5s`, `2m`, `1h`, `30d`, or a bare number of seconds.
    public static func parse(_ text: String) -> Double? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let units: [(String, Double)] = [("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600), ("d", 86400)]
        for (suffix, scale) in units where trimmed.hasSuffix(suffix) {
            guard let number = Double(trimmed.dropLast(suffix.count)), number >= 0 else { return nil }
            return number * scale
        }
        guard let number = Double(trimmed), number >= 0 else { return nil }
        return number
    }

    /// The shortest exact spelling of a duration in whole units: `250ms`, `5s`, `2m`, `1h`.
    public static func label(_ seconds: Double) -> String {
        let milliseconds = Int((seconds * 1000).rounded())
        for (suffix, scale) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)]
        where milliseconds >= scale && milliseconds % scale == 0 {
            return "\(milliseconds / scale)\(suffix)"
        }
        return "\(milliseconds)ms"
    }
}

/// Sizes as configuration spells them: `100MiB`, `5GiB`, `512KiB`, `10MB`, or bytes.
public enum ByteSizes {
    public static func parse(_ text: String) -> Int64? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let units: [(String, Int64)] = [
            ("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30), ("TiB", 1 << 40),
            ("KB", 1000), ("MB", 1_000_000), ("GB", 1_000_000_000), ("TB", 1_000_000_000_000), ("B", 1),
        ]
        for (suffix, scale) in units where trimmed.hasSuffix(suffix) {
            guard let number = Int64(trimmed.dropLast(suffix.count).trimmingCharacters(in: .whitespaces)), number > 0 else {
                return nil
            }
            let (bytes, overflow) = number.multipliedReportingOverflow(by: scale)
            return overflow ? nil : bytes
        }
        guard let number = Int64(trimmed), number > 0 else { return nil }
        return number
    }
}
