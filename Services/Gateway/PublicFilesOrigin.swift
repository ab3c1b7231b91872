import HTTPSupport
import HTTPTypes
import Hummingbird
import ServiceSupport

/// `PUBLIC_FILES_ORIGIN`, for example `https://files.example.com`: an origin of its own for
/// public files, routed to the same gateways. With it set, a public file asked for on any
/// other host is redirected there (308), and that host serves public files and the health
/// checks only. A file opened as a page then shares no origin, and so no storage, with
/// `/admin` or an app served beside the API.
struct PublicFilesOrigin: Sendable, Equatable {
    /// Scheme, host and port, as redirects name it (`https://files.example.com`).
    let origin: String
    /// The `Host` requests to that origin carry, lowercased (`files.example.com`).
    let authority: String

    init?(_ text: String) {
        let trimmed = text.hasSuffix("/") ? String(text.dropLast()) : text
        let scheme: String
        if trimmed.lowercased().hasPrefix("https://") {
            scheme = "https://"
        } else if trimmed.lowercased().hasPrefix("http://") {
            scheme = "http://"
        } else {
            return nil
        }
        let authority = trimmed.dropFirst(scheme.count).lowercased()
        guard !authority.isEmpty, authority.allSatisfy({ $0.isLetter || $0.isNumber || "-.:[]".contains($0) }) else { return nil }
        self.origin = scheme + authority
        self.authority = authority
    }

    /// `/v1/public/{public_id}/blobs/{sha256}`.
    static func isPublicFile(_ path: String) -> Bool {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        return parts.count == 6 && parts[0].isEmpty && parts[1] == "v1" && parts[2] == "public" && parts[4] == "blobs"
    }

    static let healthPaths: Set<String> = ["/healthz", "/readyz"]
}

extension EnvironmentReader {
    func publicFilesOrigin() throws(Configuration.Invalid) -> PublicFilesOrigin? {
        guard let text = value("PUBLIC_FILES_ORIGIN") else { return nil }
        guard let origin = PublicFilesOrigin(text) else {
            throw Configuration.Invalid(description: "PUBLIC_FILES_ORIGIN must be an origin such as https://files.example.com")
        }
        return origin
    }
}

/// Sends public files to their own origin and serves nothing else there.
struct PublicFilesOriginMiddleware<Context: RequestContext>: RouterMiddleware {
    let filesOrigin: PublicFilesOrigin

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let onFilesHost = request.head.authority?.lowercased() == filesOrigin.authority
        let path = request.uri.path
        if PublicFilesOrigin.isPublicFile(path) {
            guard onFilesHost else {
                return Response(status: .permanentRedirect, headers: [.location: filesOrigin.origin + request.uri.description])
            }
        } else if onFilesHost, !PublicFilesOrigin.healthPaths.contains(path) {
            throw APIError.notFound("This origin serves public files only.")
        }
        return try await next(request, context)
    }
}
