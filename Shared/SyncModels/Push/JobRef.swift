import Foundation

/// A job and the space it belongs to: what a job message names, and what the worker applies.
public struct JobRef: Hashable, Sendable, CustomStringConvertible {
    public let space: SpaceID
    public let job: JobID

    public init(space: SpaceID, job: JobID) {
        self.space = space
        self.job = job
    }

    /// The job `job` names in `space`; nil when either is not a UUID.
    public init?(space: some StringProtocol, job: some StringProtocol) {
        guard let space = SpaceID(space), let job = JobID(job) else { return nil }
        self.init(space: space, job: job)
    }

    public var description: String { "\(job) (space \(space))" }
}
