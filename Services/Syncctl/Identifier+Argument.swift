import ArgumentParser
import SyncModels

/// An id on the command line: a UUID in any case.
extension Identifier: ExpressibleByArgument {
    public init?(argument: String) { self.init(argument) }
}
