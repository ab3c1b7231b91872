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
