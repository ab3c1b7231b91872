import Hummingbird
import ServiceSupport

extension Request {
    /// An integer query parameter within `range`; absent or empty gives `fallback`,
    /// anything else is a 400 naming the parameter and its range.
    func integerParameter(_ name: String, in range: ClosedRange<Int>, default fallback: Int) throws -> Int {
        guard let text = uri.queryParameters[Substring(name)].map(String.init), !text.isEmpty else { return fallback }
        guard let value = Int(text), range.contains(value) else {
            throw APIError.badRequest("\(name) must be \(range.lowerBound) to \(range.upperBound).")
        }
        return value
    }
}
