/// A job as the database keys it: its space and its id, both canonical (lowercase) UUID
/// text. A job is its space's, like the records it writes, so that what a worker does with
/// it reaches one space's data.
public struct JobRef: Hashable, Sendable, CustomStringConvertible {
    public let space: String
    public let job: String

    public init(space: String, job: String) {
        self.space = space.lowercased()
        self.job = job.lowercased()
    }

    public var description: String { "\(job) (space \(space))" }
}
