import BlobStorage
import Foundation
import HTTPSupport
import HTTPTypes
import Hummingbird
import Persistence
import SyncModels

/// Resumable uploads, tus 1.0 (core, creation, termination) at `/v1/uploads`:
/// `Upload-Metadata` carries `sha256`, `space_id` (the personal space when absent) and
/// `content_type`. The bytes go to the object a finished upload becomes, piece by piece;
/// the last piece makes it the space's file as a `PUT` would.
struct UploadRoutes: Sendable {
    let rules: FileRules
    let catalog: BlobCatalog
    let limiter: RateLimiter
    /// How long an upload may rest between requests (`UPLOAD_EXPIRY`).
    let expiresIn: Double
    /// Unfinished uploads a user may have open at once (`OPEN_UPLOADS_PER_USER`).
    let openPerUser: Int
    static let version = "1.0.0"

    var routes: RouteCollection<SignedInRequestContext> {
        let routes = RouteCollection(context: SignedInRequestContext.self)
        routes.post("/v1/uploads", use: create)
        routes.head("/v1/uploads/:upload_id", use: status)
        routes.patch("/v1/uploads/:upload_id", use: append)
        routes.delete("/v1/uploads/:upload_id", use: terminate)
        return routes
    }

    /// What the server supports, asked before signing in.
    var publicRoutes: RouteCollection<GatewayRequestContext> {
        let routes = RouteCollection(context: GatewayRequestContext.self)
        routes.on("/v1/uploads", method: .options, use: options)
        return routes
    }

    static var tusFields: HTTPFields { [.tusResumable: version, .cacheControl: "no-store"] }

    @Sendable func options(_ request: Request, context: GatewayRequestContext) async throws -> Response {
        var headers = Self.tusFields
        headers[.tusVersion] = Self.version
        headers[.tusExtension] = "creation,termination"
        headers[.tusMaxSize] = String(rules.ingest.maxBytes)
        return Response(status: .noContent, headers: headers)
    }

    /// tus answers a client of another version with 412 and the version it speaks; a
    /// request without the header is no tus request at all.
    func checkVersion(_ request: Request) throws {
        guard let version = request.headers[.tusResumable] else {
            throw APIError.badRequest("A tus request carries Tus-Resumable: \(Self.version).")
        }
        guard version == Self.version else {
            throw APIError(status: .preconditionFailed, code: .invalidRequest, detail: "Tus-Resumable must be \(Self.version).")
        }
    }

    @Sendable func create(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        try checkVersion(request)
        try limiter.check(context.user.text, limit: "push")
        guard let lengthText = request.headers[.uploadLength], let length = Int64(lengthText), length >= 0,
              lengthText.utf8.allSatisfy({ (48...57).contains($0) }) else {
            throw APIError.badRequest("Upload-Length must be the file's size in bytes (deferred lengths are not supported).")
        }
        guard let metadata = request.headers[.uploadMetadata].flatMap(TusMetadata.parse) else {
            throw APIError.badRequest("Upload-Metadata must carry sha256 (and may carry space_id and content_type), each Base64.")
        }
        guard let sha256 = metadata["sha256"], BlobReference.isValidSHA256(sha256) else {
            throw APIError.badRequest("Upload-Metadata must carry sha256: the file's SHA-256, 64 lowercase hex digits.")
        }
        let contentType = try FileRules.contentType(metadata["content_type"])
        var named: SpaceID?
        if let space = metadata["space_id"] {
            guard let id = SpaceID(space) else { throw APIError.badRequest("space_id must be a space's id.") }
            named = id
        }
        let space = try await rules.writableSpace(named, user: context.user)
        if length > rules.ingest.maxBytes { throw rules.tooLarge }
        let upload: BlobCatalog.Upload
        switch try await catalog.createUpload(
            user: context.user, space: space, sha256: sha256, contentType: contentType, length: length,
            store: rules.ingest.writingStore, expiresIn: expiresIn, quota: rules.ingest.spaceQuota, maxOpen: openPerUser)
        {
        case .created(let created): upload = created
        case .spaceGone: throw APIError.notFound("No such space.")
        case .overQuota: throw rules.overQuota
        case .tooManyOpen:
            throw APIError.tooMany(
                "At most \(openPerUser) unfinished uploads at once; finish or end one first.", limit: openPerUser, retryAfter: 60)
        }
        var headers = Self.tusFields
        headers[.location] = "/v1/uploads/\(upload.uploadID.uuidString.lowercased())"
        headers[.uploadOffset] = "0"
        // An empty file has no bytes to send: it is finished here.
        if length == 0 {
            try rules.file(from: try await rules.ingest.complete(upload), sha256: sha256)
        }
        return Response(status: .created, headers: headers)
    }

    @Sendable func status(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        try checkVersion(request)
        var upload = try await find(context, user: context.user)
        // Every byte in but not yet a file (the request that sent the last one ended
        // first): it is finished now, so that the offset tells the truth.
        if upload.received == upload.length, !upload.finished {
            try rules.file(from: try await rules.ingest.complete(upload), sha256: upload.sha256)
            upload = try await find(context, user: context.user)
        }
        var headers = Self.tusFields
        headers[.uploadOffset] = String(upload.received)
        headers[.uploadLength] = String(upload.length)
        return Response(status: .ok, headers: headers)
    }

    @Sendable func append(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        try checkVersion(request)
        try limiter.check(context.user.text, limit: "push")
        let slot = try rules.uploadsPerUser.check(context.user.text, limit: "uploads")
        defer { slot.release() }
        guard request.headers[.contentType] == "application/offset+octet-stream" else {
            throw APIError(
                status: .unsupportedMediaType, code: .invalidRequest, detail: "A PATCH carries application/offset+octet-stream.")
        }
        let upload = try await find(context, user: context.user)
        // Write access is checked on every piece, not only at creation.
        _ = try await rules.writableSpace(upload.spaceID, user: context.user)
        guard let offsetText = request.headers[.uploadOffset], let offset = Int64(offsetText), offset >= 0 else {
            throw APIError.badRequest("Upload-Offset must be where the upload stands, in bytes.")
        }
        guard offset == upload.received else {
            throw APIError(status: .conflict, code: .conflict, detail: "The upload stands at \(upload.received) bytes, not \(offset).")
        }
        var headers = Self.tusFields
        if upload.finished {
            headers[.uploadOffset] = String(upload.received)
            return Response(status: .noContent, headers: headers)
        }
        switch try await rules.ingest.append(upload, at: offset, body: request.body, expiresIn: expiresIn) {
        case .conflict:
            throw APIError(status: .conflict, code: .conflict, detail: "Another request moved the upload's offset first.")
        case .exceedsLength:
            throw APIError.tooLarge("The upload's length is \(upload.length) bytes.", limit: upload.length)
        case .advanced(let end):
            if end == upload.length {
                try rules.file(from: try await rules.ingest.complete(upload), sha256: upload.sha256)
            }
            headers[.uploadOffset] = String(end)
            return Response(status: .noContent, headers: headers)
        }
    }

    @Sendable func terminate(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        try checkVersion(request)
        let upload = try await find(context, user: context.user)
        try await rules.ingest.end(upload)
        return Response(status: .noContent, headers: Self.tusFields)
    }

    /// The caller's upload; 404 for anyone else's, an unknown one, or one expired.
    func find(_ context: SignedInRequestContext, user: UserID) async throws -> BlobCatalog.Upload {
        guard let upload = try await catalog.upload(id: try context.parameters.require("upload_id"), user: user) else {
            throw APIError.notFound("No such upload.")
        }
        return upload
    }
}

extension HTTPField.Name {
    static let tusResumable = HTTPField.Name("Tus-Resumable")!
    static let tusVersion = HTTPField.Name("Tus-Version")!
    static let tusExtension = HTTPField.Name("Tus-Extension")!
    static let tusMaxSize = HTTPField.Name("Tus-Max-Size")!
    static let uploadLength = HTTPField.Name("Upload-Length")!
    static let uploadMetadata = HTTPField.Name("Upload-Metadata")!
    static let uploadOffset = HTTPField.Name("Upload-Offset")!
}
