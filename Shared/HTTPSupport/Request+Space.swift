import Hummingbird
import SyncModels

extension Request {
    /// The `space_id` query parameter (pull, stream, job status): nil when absent, the id when
    /// it is one, else a 400. Whether the caller is a member is the route's to check.
    public func spaceParameter() throws -> SpaceID? {
        guard let text = uri.queryParameters["space_id"] else { return nil }
        guard let id = SpaceID(text) else { throw APIError.badRequest("space_id must be a space's id.") }
        return id
    }
}
