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
    let rules: FileRules
    let spaces: SpaceStore
    let catalog: BlobCatalog
    let stores: BlobStores
    /// The push bucket: an upload costs a token, as a push does.
    let limiter: RateLimiter
    let publicLimiter: RateLimiter
    /// Downloads at once per user, and per client address for public files.
    let downloadsPerUser: ConcurrencyLimiter
    let downloadsPerAddress: ConcurrencyLimiter
    /// The size of each download's pieces, from a budget every download shares.
    let downloadPieces: DownloadPieces

    /// The same answer, byte for byte, for a hash the space lacks, a space that does not
    /// exist and one the caller is not a member of: no answer tells whether anyone holds
    /// a file.
    static let noSuchFile = APIError.notFound("No such file.")

    var routes: RouteCollection<SignedInRequestContext> {
        let routes = RouteCollection(context: SignedInRequestContext.self)
        routes.put("/v1/blobs/:sha256", use: put)
        routes.get("/v1/blobs/:sha256", use: get)
        routes.head("/v1/blobs/:sha256", use: get)
        return routes
    }

    var publicRoutes: RouteCollection<GatewayRequestContext> {
        let routes = RouteCollection(context: GatewayRequestContext.self)
        routes.get("/v1/public/:public_id/blobs/:sha256", use: getPublic)
        routes.head("/v1/public/:public_id/blobs/:sha256", use: getPublic)
        return routes
    }

    @Sendable func put(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        try limiter.check(context.user.text, limit: "push")
        let slot = try rules.uploadsPerUser.check(context.user.text, limit: "uploads")
        defer { slot.release() }
        let sha256 = try Self.hash(context.parameters)
        let space = try await rules.writableSpace(try request.spaceParameter(), user: context.user)
        let contentType = try FileRules.contentType(request.headers[.contentType])
        if let length = request.headers[.contentLength].flatMap({ Int64($0) }) {
            try await rules.checkRoom(for: length, in: space)
        }
        let outcome = try await rules.ingest.put(
            space: space, user: context.user, sha256: sha256, contentType: contentType, body: request.body)
        let file = try rules.file(from: outcome, sha256: sha256)
        return try jsonResponse(BlobView(file.blob), status: file.created ? .created : .ok)
    }

    @Sendable func get(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let sha256 = try Self.hash(context.parameters)
        let space: SpaceID
        if let named = try request.spaceParameter() {
            guard try await spaces.role(user: context.user, space: named) != nil else { throw Self.noSuchFile }
            space = named
        } else {
            space = try await spaces.personalSpace(user: context.user)
        }
        guard let blob = try await catalog.find(space: space, sha256: sha256) else { throw Self.noSuchFile }
        return try await serve(
            blob, request: request, channel: context.channel, cacheControl: "private, max-age=31536000, immutable",
            downloads: (downloadsPerUser, context.user.text))
    }

    /// No token, any origin; only while the record is public and references the file.
    @Sendable func getPublic(_ request: Request, context: GatewayRequestContext) async throws -> Response {
        try publicLimiter.check(context.clientAddress, limit: "public")
        let publicID = try context.parameters.require("public_id")
        let sha256 = try Self.hash(context.parameters)
        guard Names.isValidPublicID(publicID), let blob = try await catalog.publicBlob(publicID: publicID, sha256: sha256) else {
            throw Self.noSuchFile
        }
        // Revalidated on every use, so that unpublishing stops it at once.
        return try await serve(
            blob, request: request, channel: context.channel, cacheControl: "public, no-cache",
            downloads: (downloadsPerAddress, context.clientAddress))
    }

    /// The file, whole or the part a `Range` asks for, or 304 when the reader has it; never
    /// as a page that runs (StoredFileHeaders).
    /// A body takes one of `downloads`' slots for its key until it is written. It is read a
    /// piece at a time, the next once the socket has taken the last (`WriteGate`), in
    /// pieces that grow while the client keeps up (`DownloadPieces`): a reader that stops
    /// reading holds one piece, and is closed by the transfer guard.
    func serve(
        _ blob: BlobCatalog.StoredBlob, request: Request, channel: any Channel, cacheControl: String,
        downloads: (limiter: ConcurrencyLimiter, key: String)
    ) async throws -> Response {
        guard let kind = BlobStoreKind(rawValue: blob.store), let store = stores.store(kind) else {
            throw APIError.unavailable("The store holding this file is not configured on this gateway.")
        }
        let (status, headers, range): (HTTPResponse.Status, HTTPFields, Range<Int64>)
        switch Self.plan(blob, request: request, cacheControl: cacheControl) {
        case .answered(let response): return response
        case .send(let sendStatus, let sendHeaders, let sendRange): (status, headers, range) = (sendStatus, sendHeaders, sendRange)
        }
        if request.method == .head { return Response(status: status, headers: headers) }
        let slot = try downloads.limiter.check(downloads.key, limit: "downloads")
        BlobMetrics.downloads.increment()
        let body = body(blob, range: range, from: store, gate: await WriteGate.of(channel), slot: slot)
        return Response(status: status, headers: headers, body: body)
    }

    /// What a request for the file gets before any byte is read.
    enum Plan {
        /// 304, or 416 for a range outside the file.
        case answered(Response)
        /// The whole file (200) or a part (206).
        case send(HTTPResponse.Status, HTTPFields, Range<Int64>)
    }

    static func plan(_ blob: BlobCatalog.StoredBlob, request: Request, cacheControl: String) -> Plan {
        let etag = "\"\(blob.sha256)\""
        var headers = HTTPFields()
        headers[.eTag] = etag
        headers[.cacheControl] = cacheControl
        StoredFileHeaders.apply(contentType: blob.contentType, to: &headers)
        if request.ifNoneMatch(etag) {
            return .answered(Response(status: .notModified, headers: headers))
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
                return .answered(Response(status: problem.status, headers: fields, body: .init(byteBuffer: problem.body)))
            }
        }
        headers[.contentLength] = String(range.upperBound - range.lowerBound)
        return .send(status, headers, range)
    }

    /// The bytes of `range`, read a piece at a time as the socket takes them; `slot` is
    /// released once they are written.
    func body(
        _ blob: BlobCatalog.StoredBlob, range readRange: Range<Int64>, from store: any BlobStore, gate: WriteGate?,
        slot: ConcurrencyLimiter.Slot
    ) -> ResponseBody {
        let pieces = downloadPieces
        return ResponseBody(contentLength: Int(readRange.upperBound - readRange.lowerBound)) { writer in
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
        }
    }

    static func hash(_ parameters: Parameters) throws -> String {
        let text = try parameters.require("sha256")
        guard BlobReference.isValidSHA256(text) else { throw APIError.badRequest("A file is named by its SHA-256: 64 lowercase hex digits.") }
        return text
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
