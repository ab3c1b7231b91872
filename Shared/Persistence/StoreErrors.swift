/// Why an apply transaction was rolled back when PostgreSQL raised nothing.
public enum ApplyError: Error, Equatable, CustomStringConvertible {
    /// Records the apply read were deleted (by purge) before its write reached them:
    /// nothing was written, and applying again reads what is there now.
    case recordsGoneAtWrite(count: Int)

    public var description: String {
        switch self {
        case .recordsGoneAtWrite(let count): "\(count) of the records read were gone at the write; applying again"
        }
    }
}

/// The database answered other than its statement promises: a row the statement returns
/// is missing, or a value is one this build does not know. Never the caller's fault: a
/// bug, or a schema of another build.
public struct UnexpectedAnswer: Error, CustomStringConvertible {
    public let description: String

    public init(_ description: String) {
        self.description = description
    }
}
