import Hummingbird
import ServiceSupport

extension Request {
    /// An integer query parameter within `range`; absent gives `fallback`, anything else
    /// (an empty value included) is a 400 naming the parameter and its range.
    func integerParameter(_ name: String, in range: ClosedRange<Int>, default fallback: Int) throws -> Int {
        guard let text = uri.queryParameters[Substring(name)].map(String.init) else { return fallback }
        guard let value = Int(text), range.contains(value) else {
            throw APIError.badRequest("\(name) must be \(range.lowerBound) to \(range.upperBound).")
        }
        return value
    }
}
