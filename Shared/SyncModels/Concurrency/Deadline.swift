/// Work that ends by a deadline: the whole of it, an answer's body included, however
/// slowly the other side sends it. An HTTP client's own timeouts bound the connection and
/// each read; a peer that sends a byte every few seconds passes both forever.
public struct DeadlineExceeded: Error, CustomStringConvertible, Sendable {
    public let seconds: Double

    public var description: String { "no complete answer within \(seconds) s" }
}

/// Runs `work`, cancelling it and throwing `DeadlineExceeded` when it has not finished
/// within `seconds`. The work must end on cancellation (AsyncHTTPClient's requests and
/// body streams do).
public func withDeadline<Value: Sendable>(
    seconds: Double, _ work: @escaping @Sendable () async throws -> Value
) async throws -> Value {
    try await withThrowingTaskGroup(of: Value?.self) { group in
        group.addTask { try await work() }
        group.addTask {
            try? await Task.sleep(for: .seconds(seconds))
            return nil
        }
        defer { group.cancelAll() }
        while let next = try await group.next() {
            if let value = next { return value }
            if !Task.isCancelled { throw DeadlineExceeded(seconds: seconds) }
        }
        throw CancellationError()
    }
}
