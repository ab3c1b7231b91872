import BlobStorage
import Foundation
import HTTPSupport
import HTTPTypes
import Hummingbird
import Metrics
import NIOCore
import Persistence
import ServiceSupport
import SyncModels

/// `PUT`, `GET` and `HEAD /v1/blobs/{sha256}?space_id=` (a space's files), and
/// `GET /v1/public/{public_id}/blobs/{sha256}` (the files of a public record).
struct BlobRoutes: Sendable {
    let auth: Authenticator
    let spaces: SpaceStore
    let catalog: BlobCatalog
    let stores: BlobStores
    let ingest: BlobIngest
    /// The push bucket: an upload costs a token, as a push does.
    let limiter: RateLimiter
    let publicLimiter: RateLimiter
    /// Downloads at once per user, and per client address for public files; uploads
    /// (`PUT` and tus `PATCH`) at once per user.
    let downloadsPerUser: ConcurrencyLimiter
    let downloadsPerAddress: ConcurrencyLimiter
    let uploadsPerUser: ConcurrencyLimiter
    /// The size of each download's pieces, from a budget every download shares.
    let downloadPieces: DownloadPieces

    /// The same answer, byte for byte, for a hash the space lacks, a space that does not
    /// exist and one the caller is not a member of: no answer tells whether anyone holds
    /// a file.
    static let noSuchFile = APIError.notFound("No such file.")

    func register(on router: Router<GatewayRequestContext>) {
        router.put("/v1/blobs/:sha256", use: put)
        router.get("/v1/blobs/:sha256", use: get)
        router.head("/v1/blobs/:sha256", use: get)
        router.get("/v1/public/:public_id/blobs/:sha256", use: getPublic)
        router.head("/v1/public/:public_id/blobs/:sha256", use: getPublic)
    }

    @Sendable func put(_ request: Request, context: GatewayRequestContext) async throws -> Response {
        let claims = try await auth.user(request, context: context)
        try limiter.check(claims.sub, limit: "push")
        let slot = try uploadsPerUser.check(claims.sub, limit: "uploads")
        defer { slot.release() }
        let sha256 = try Self.hash(context)
        let space = try await writableSpace(try request.spaceParameter(), user: claims.sub)
        let contentType = try Self.contentType(request.headers[.contentType])
        if let length = request.headers[.contentLength].flatMap({ Int64($0) }) {
            try await checkRoom(for: length, in: space)
        }
        let outcome = try await ingest.put(space: space, user: claims.sub, sha256: sha256, contentType: contentType, body: request.body)
        return try answer(outcome, sha256: sha256, space: space)
    }

    /// Whether a file of `length` bytes can fit, before any byte of it is read.
    func checkRoom(for length: Int64, in space: String) async throws {
        if length > ingest.maxBytes { throw Self.tooLarge(ingest.maxBytes) }
        if try await catalog.usage(space: space) + length > ingest.spaceQuota { throw Self.overQuota(ingest.spaceQuota) }
    }

    /// The answer to a finished upload, `PUT` or tus.
    func answer(_ outcome: BlobIngest.Outcome, sha256: String, space: String) throws -> Response {
        BlobMetrics.uploads(outcome)
        switch outcome {
        case .created(let blob):
            BlobMetrics.uploadedBytes.increment(by: Int(blob.size))
            return try jsonResponse(BlobView(blob), status: .created)
        case .existing(let blob):
            return try jsonResponse(BlobView(blob))
        case .mismatch(let actual):
            throw APIError(
                status: .unprocessableContent, code: .hashMismatch,
                detail: "The body's SHA-256 is \(actual), not \(sha256); nothing was stored.")
        case .tooLarge:
            throw Self.tooLarge(ingest.maxBytes)
        case .overQuota:
            throw Self.overQuota(ingest.spaceQuota)
        case .spaceGone:
            throw APIError.notFound("No such space.")
        case .notWritable:
            throw Self.notWritable
        case .abandoned:
            throw APIError(status: .requestTimeout, code: .invalidRequest, detail: "The upload took too long; send it again.")
        }
    }

    /// The uploader was removed from the space, or made a viewer, while the file came in.
    static let notWritable = APIError.forbidden("You can no longer add files to this space; nothing was stored.")

    static func tooLarge(_ limit: Int64) -> APIError {
        APIError.tooLarge("A file may have at most \(limit) bytes.", limit: limit)
    }

    static func overQuota(_ quota: Int64) -> APIError {
        APIError.tooLarge("This file would take the space's files over its quota of \(quota) bytes.", limit: quota)
    }

    /// The space named by `space_id` (the personal one when absent), which the caller may
    /// write to.
    func writableSpace(_ named: String?, user: String) async throws -> String {
        guard let space = named else { return try await spaces.personalSpace(user: user) }
        switch try await spaces.role(user: user, space: space) {
        case nil: throw APIError.notFound("No such space.")
        case let role? where !role.canWrite: throw APIError.forbidden("A viewer of this space cannot add files to it.")
        default: return space
        }
    }

    @Sendable func get(_ request: Request, context: GatewayRequestContext) async throws -> Response {
        let claims = try await auth.user(request, context: context)
        let sha256 = try Self.hash(context)
        let space: String
        if let named = try request.spaceParameter() {
            guard try await spaces.role(user: claims.sub, space: named) != nil else { throw Self.noSuchFile }
            space = named
        } else {
            space = try await spaces.personalSpace(user: claims.sub)
        }
        guard let blob = try await catalog.find(space: space, sha256: sha256) else { throw Self.noSuchFile }
        return try await serve(
            blob, request: request, context: context, cacheControl: "private, max-age=31536000, immutable",
            downloads: (downloadsPerUser, claims.sub))
    }

    /// No token, any origin; only while the record is public and references the file.
    @Sendable func getPublic(_ request: Request, context: GatewayRequestContext) async throws -> Response {
        try publicLimiter.check(context.clientAddress, limit: "public")
        let publicID = try context.parameters.require("public_id")
        let sha256 = try Self.hash(context)
        guard Names.isValidPublicID(publicID), let blob = try await catalog.publicBlob(publicID: publicID, sha256: sha256) else {
            throw Self.noSuchFile
        }
        // Revalidated on every use, so that unpublishing stops it at once.
        return try await serve(
            blob, request: request, context: context, cacheControl: "public, no-cache",
            downloads: (downloadsPerAddress, context.clientAddress))
    }

    /// The file, whole or the part a `Range` asks for, or 304 when the reader has it; never
    /// as a page that runs (StoredFileHeaders).
    /// A body takes one of `downloads`' slots for its key until it is written. It is read a
    /// piece at a time, the next once the socket has taken the last (`WriteGate`), in
    /// pieces that grow while the client keeps up (`DownloadPieces`): a reader that stops
    /// reading holds one piece, and is closed by the transfer guard.
    func serve(
        _ blob: BlobCatalog.StoredBlob, request: Request, context: GatewayRequestContext, cacheControl: String,
        downloads: (limiter: ConcurrencyLimiter, key: String)
    ) async throws -> Response {
        guard let kind = BlobStoreKind(rawValue: blob.store), let store = stores.store(kind) else {
            throw APIError.unavailable("The store holding this file is not configured on this gateway.")
        }
        let etag = "\"\(blob.sha256)\""
        var headers = HTTPFields()
        headers[.eTag] = etag
        headers[.cacheControl] = cacheControl
        StoredFileHeaders.apply(contentType: blob.contentType, to: &headers)
        if request.ifNoneMatch(etag) {
            return Response(status: .notModified, headers: headers)
        }
        headers[.contentType] = blob.contentType
        headers[.acceptRanges] = "bytes"
        var status = HTTPResponse.Status.ok
        var range: Range<Int64> = 0..<blob.size
        // `If-Range` with another validator asks for the whole file.
        let rangeApplies = request.headers[.ifRange].map { $0 == etag } ?? true
        if rangeApplies {
            switch ByteRangeRequest(header: request.headers[.range], size: blob.size) {
            case .whole:
                break
            case .part(let part):
                range = part
                status = .partialContent
                headers[.contentRange] = "bytes \(part.lowerBound)-\(part.upperBound - 1)/\(blob.size)"
            case .unsatisfiable:
                let problem = APIError(
                    status: .rangeNotSatisfiable, code: .rangeNotSatisfiable, detail: "The file has \(blob.size) bytes.")
                var fields = problem.headers
                fields[.contentRange] = "bytes */\(blob.size)"
                return Response(status: problem.status, headers: fields, body: .init(byteBuffer: problem.body))
            }
        }
        let length = range.upperBound - range.lowerBound
        headers[.contentLength] = String(length)
        if request.method == .head { return Response(status: status, headers: headers) }
        let slot = try downloads.limiter.check(downloads.key, limit: "downloads")
        BlobMetrics.downloads.increment()
        let readRange = range
        let gate = await WriteGate.of(context.channel)
        let pieces = downloadPieces
        return Response(status: status, headers: headers, body: ResponseBody(contentLength: Int(length)) { writer in
            pieces.downloadStarted()
            defer {
                slot.release()
                if pieces.downloadEnded() { HeapTrim.returnFreeMemory() }
            }
            var pace = DownloadPieces.Pace()
            var position = readRange.lowerBound
            while position < readRange.upperBound {
                let pieceBytes = pieces.take(pace.next)
                defer { pieces.giveBack(pieceBytes) }
                let part = position..<min(readRange.upperBound, position + Int64(pieceBytes))
                try await store.read(
                    object: blob.objectID, sha256: blob.sha256, sealed: true, range: part, pieceBytes: pieceBytes
                ) { piece in
                    position += Int64(piece.readableBytes)
                    BlobMetrics.downloadedBytes.increment(by: piece.readableBytes)
                    gate?.handOver(piece.readableBytes)
                    try await writer.write(piece)
                    // The next piece is read once the socket has taken this one: the kernel's
                    // send buffer keeps a fast client busy meanwhile, and a client that
                    // stops reading leaves one piece in the gateway, not two.
                    let waitStarted = ContinuousClock.now
                    await gate?.wait(untilAtMost: 0)
                    pace.pieceWritten(waited: gate == nil ? .seconds(1) : ContinuousClock.now - waitStarted)
                }
            }
            try await writer.finish(nil)
        })
    }

    static func hash(_ context: GatewayRequestContext) throws -> String {
        let text = try context.parameters.require("sha256")
        guard BlobReference.isValidSHA256(text) else { throw APIError.badRequest("A file is named by its SHA-256: 64 lowercase hex digits.") }
        return text
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

/// A stored file as the API shows it.
struct BlobView: Encodable {
    let sha256: String
    let size: Int64
    let contentType: String

    enum CodingKeys: String, CodingKey {
        case sha256, size
        case contentType = "content_type"
    }

    init(_ blob: BlobCatalog.StoredBlob) {
        sha256 = blob.sha256
        size = blob.size
        contentType = blob.contentType
    }
}

enum BlobMetrics {
    static let uploadedBytes = Counter(label: "syncline_blob_uploaded_bytes_total")
    static let downloads = Counter(label: "syncline_blob_downloads_total")
    static let downloadedBytes = Counter(label: "syncline_blob_downloaded_bytes_total")

    static func uploads(_ outcome: BlobIngest.Outcome) {
        let label: String
        switch outcome {
        case .created: label = "created"
        case .existing: label = "existing"
        case .mismatch: label = "hash_mismatch"
        case .tooLarge, .overQuota: label = "too_large"
        case .spaceGone, .notWritable, .abandoned: label = "abandoned"
        }
        Counter(label: "syncline_blob_uploads_total", dimensions: [("outcome", label)]).increment()
    }
}

extension HTTPField.Name {
    static let ifRange = HTTPField.Name("If-Range")!
}
