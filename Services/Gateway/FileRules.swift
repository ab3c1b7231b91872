import BlobStorage
import Hummingbird
import HTTPSupport
import Persistence
import SyncModels

/// The rules every way of adding a file to a space follows, a `PUT` or a tus upload: who may
/// add one, what fits, how many uploads a user runs at once, and what a finished upload
/// comes to.
struct FileRules: Sendable {
    let spaces: SpaceStore
    let catalog: BlobCatalog
    let ingest: BlobIngest
    /// Uploads (`PUT` and tus `PATCH`) at once per user.
    let uploadsPerUser: ConcurrencyLimiter

    /// The space named by `space_id` (the personal one when absent), which the caller may
    /// write to.
    func writableSpace(_ named: SpaceID?, user: UserID) async throws -> SpaceID {
        guard let space = named else { return try await spaces.personalSpace(user: user) }
        switch try await spaces.role(user: user, space: space) {
        case nil: throw APIError.notFound("No such space.")
        case let role? where !role.canWrite: throw APIError.forbidden("A viewer of this space cannot add files to it.")
        default: return space
        }
    }

    /// Whether a file of `length` bytes can fit, before any byte of it is read.
    func checkRoom(for length: Int64, in space: SpaceID) async throws {
        if length > ingest.maxBytes { throw tooLarge }
        if try await catalog.usage(space: space) + length > ingest.spaceQuota { throw overQuota }
    }

    /// The file a finished upload made or found (`created` when new), counted in the
    /// metrics; every other outcome is the error the client is told.
    @discardableResult
    func file(from outcome: BlobIngest.Outcome, sha256: String) throws -> (blob: BlobCatalog.StoredBlob, created: Bool) {
        BlobMetrics.uploads(outcome)
        switch outcome {
        case .created(let blob):
            BlobMetrics.uploadedBytes.increment(by: Int(blob.size))
            return (blob, true)
        case .existing(let blob):
            return (blob, false)
        case .mismatch(let actual):
            throw APIError(
                status: .unprocessableContent, code: .hashMismatch,
                detail: "The body's SHA-256 is \(actual), not \(sha256); nothing was stored.")
        case .tooLarge:
            throw tooLarge
        case .overQuota:
            throw overQuota
        case .spaceGone:
            throw APIError.notFound("No such space.")
        case .notWritable:
            // The uploader was removed from the space, or made a viewer, while the file came in.
            throw APIError.forbidden("You can no longer add files to this space; nothing was stored.")
        case .abandoned:
            throw APIError(status: .requestTimeout, code: .invalidRequest, detail: "The upload took too long; send it again.")
        }
    }

    var tooLarge: APIError {
        APIError.tooLarge("A file may have at most \(ingest.maxBytes) bytes.", limit: ingest.maxBytes)
    }

    var overQuota: APIError {
        APIError.tooLarge(
            "This file would take the space's files over its quota of \(ingest.spaceQuota) bytes.", limit: ingest.spaceQuota)
    }

    /// The `Content-Type` kept with a file; `application/octet-stream` when none is sent.
    static func contentType(_ header: String?) throws -> String {
        guard let header else { return "application/octet-stream" }
        guard BlobReference.isValidContentType(header) else {
            throw APIError.badRequest("Content-Type must be a media type such as image/jpeg.")
        }
        return header
    }
}
