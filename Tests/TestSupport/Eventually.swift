import Foundation

/// What `eventually` waited for and never saw.
public struct TimedOut: Error, CustomStringConvertible {
    public let description: String
}

/// Runs `body` every `interval` until it returns a value (an error or nil is another try)
/// or `seconds` have passed; then it tries once more, and throws that try's error or
/// `TimedOut` naming `what`.
@discardableResult
public func eventually<T>(
    within seconds: Double, every interval: Duration = .milliseconds(100), _ what: String,
    _ body: () async throws -> T?
) async throws -> T {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if let value = try? await body() { return value }
        try await Task.sleep(for: interval)
    }
    if let value = try await body() { return value }
    throw TimedOut(description: "timed out after \(seconds) s waiting for \(what)")
}
