import AMQPBridge
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import PQBridge
import SyncModels

/// An error the API answers with: `application/problem+json` with a stable `code`.
public struct APIError: HTTPResponseError, Sendable {
    public enum Code: String, Sendable {
        case invalidRequest = "invalid_request"
        case unauthorized
        case forbidden
        case notFound = "not_found"
        case payloadTooLarge = "payload_too_large"
        case blobMissing = "blob_missing"
        case hashMismatch = "hash_mismatch"
        case rangeNotSatisfiable = "range_not_satisfiable"
        case conflict
        case rateLimited = "rate_limited"
        case resyncRequired = "resync_required"
        case unavailable
        case internalError = "internal_error"
    }

    public let status: HTTPResponse.Status
    public let code: Code
    public let detail: String
    public var retryAfterSeconds: Int?
    /// The `Allow` header of a 405.
    public var allow: String?
    /// Extension members (RFC 9457) a client acts on, so that it never reads `detail`:
    /// the op a problem is about (`op_index`), where in the request (`pointer`, a JSON
    /// Pointer), the file it names (`sha256`), and the limit it broke (`limit`).
    public var opIndex: Int?
    public var pointer: String?
    public var sha256: String?
    public var limit: Int64?
    /// The app's rule that refused an op (`recipes.schema`), and the rules' version.
    public var rule: String?
    public var rulesVersion: Int64?
    /// Why a 401 refused the bearer token (`missing`, `expired`, `invalid`): a client tells
    /// "sign in again" from anything else without reading `detail`. `expired` is said only
    /// of a token whose signature held.
    public var token: TokenRefusal?

    /// What was wrong with a refused bearer token.
    public enum TokenRefusal: String, Sendable {
        case missing, expired, invalid
    }

    public init(status: HTTPResponse.Status, code: Code, detail: String, retryAfterSeconds: Int? = nil) {
        self.status = status
        self.code = code
        self.detail = detail
        self.retryAfterSeconds = retryAfterSeconds
    }

    public static func badRequest(_ detail: String) -> APIError { APIError(status: .badRequest, code: .invalidRequest, detail: detail) }
    public static func unprocessable(_ detail: String) -> APIError { APIError(status: .unprocessableContent, code: .invalidRequest, detail: detail) }
    public static func unauthorized(_ detail: String, token: TokenRefusal) -> APIError {
        var error = APIError(status: .unauthorized, code: .unauthorized, detail: detail)
        error.token = token
        return error
    }
    public static func forbidden(_ detail: String) -> APIError { APIError(status: .forbidden, code: .forbidden, detail: detail) }
    public static func notFound(_ detail: String = "No such resource.") -> APIError { APIError(status: .notFound, code: .notFound, detail: detail) }
    /// 429 with `Retry-After`; `limit`: how many the limit allows (per second for a rate,
    /// at once for a cap).
    public static func rateLimited(retryAfter seconds: Int, limit: Int64? = nil) -> APIError {
        var error = APIError(
            status: .tooManyRequests, code: .rateLimited, detail: "Too many requests; retry after \(seconds) s.", retryAfterSeconds: seconds)
        error.limit = limit
        return error
    }

    /// 429 for a cap on how many there may be at once (`limit`), with `Retry-After` when
    /// waiting helps.
    public static func tooMany(_ detail: String, limit: Int, retryAfter seconds: Int? = nil) -> APIError {
        var error = APIError(status: .tooManyRequests, code: .rateLimited, detail: detail, retryAfterSeconds: seconds)
        error.limit = Int64(limit)
        return error
    }

    /// 413; `limit`: the most bytes allowed.
    public static func tooLarge(_ detail: String, limit: Int64) -> APIError {
        var error = APIError(status: .contentTooLarge, code: .payloadTooLarge, detail: detail)
        error.limit = limit
        return error
    }
    public static func unavailable(_ detail: String) -> APIError {
        APIError(status: .serviceUnavailable, code: .unavailable, detail: detail, retryAfterSeconds: 5)
    }

    public static func from(_ failure: ValidationFailure) -> APIError {
        switch failure {
        case .notJSON(let detail):
            return .badRequest(detail)
        case .invalid(let detail, let pointer, let limit):
            var error = APIError.unprocessable(detail)
            error.pointer = pointer
            error.limit = limit.map(Int64.init)
            return error
        case .op(let index, let pointer, let detail, let limit):
            var error = APIError.unprocessable(detail)
            error.opIndex = index
            error.pointer = pointer
            error.limit = limit.map(Int64.init)
            return error
        }
    }

    /// 422 for op `index`, which the app's rules (`version`) refuse.
    public static func ruleRefused(_ refusal: RuleRefusal, op index: Int, version: Int64) -> APIError {
        var error = APIError.unprocessable("ops[\(index)]: \(refusal.detail) (rule \(refusal.rule)).")
        error.opIndex = index
        error.pointer = "/ops/\(index)\(refusal.pointer)"
        error.rule = refusal.rule
        error.rulesVersion = version
        return error
    }

    struct Body: Encodable {
        let type: String
        let title: String
        let status: Int
        let detail: String
        let code: String
        let opIndex: Int?
        let pointer: String?
        let sha256: String?
        let limit: Int64?
        let rule: String?
        let rulesVersion: Int64?
        let token: String?

        enum CodingKeys: String, CodingKey {
            case type, title, status, detail, code, opIndex = "op_index", pointer, sha256, limit, rule, rulesVersion = "rules_version", token
        }
    }

    /// The problem; a `HEAD` request gets its header fields alone.
    public func response(from request: Request, context: some RequestContext) throws -> Response {
        Response(status: status, headers: headers, body: request.method == .head ? .init() : .init(byteBuffer: body))
    }

    /// The problem's header fields (for writers below the router, such as a refused upgrade).
    public var headers: HTTPFields {
        var headers = HTTPFields()
        headers[.contentType] = "application/problem+json"
        if let retryAfterSeconds { headers[.retryAfter] = String(retryAfterSeconds) }
        // RFC 6750: a token that was sent and refused is an `invalid_token`.
        if status == .unauthorized { headers[.wwwAuthenticate] = token == nil || token == .missing ? "Bearer" : "Bearer error=\"invalid_token\"" }
        if let allow { headers[.allow] = allow }
        return headers
    }

    /// The problem+json body.
    public var body: ByteBuffer {
        let body = Body(
            type: "https://syncline.dev/problems/\(code.rawValue)", title: status.reasonPhrase,
            status: status.code, detail: detail, code: code.rawValue,
            opIndex: opIndex, pointer: pointer, sha256: sha256, limit: limit, rule: rule, rulesVersion: rulesVersion, token: token?.rawValue)
        return ByteBuffer(bytes: (try? JSONCoding.encode(body)) ?? Data())
    }
}

/// Turns every error into problem+json in one place (`APIError.problem(for:)`); a path
/// the router does not know for this method but does for others answers 405 with `Allow`.
public struct ProblemMiddleware<Context: RequestContext>: RouterMiddleware {
    let routes: RouteMethods?

    public init(routes: RouteMethods? = nil) { self.routes = routes }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as HTTPError where error.status == .notFound {
            if let allowed = routes?.allowed(path: request.uri.path), !allowed.contains(request.method.rawValue) {
                throw APIError.methodNotAllowed(allowed: allowed)
            }
            throw APIError.notFound()
        } catch {
            throw APIError.problem(for: error, logger: context.logger)
        }
    }
}

extension APIError {
    /// 405 with the `Allow` header.
    public static func methodNotAllowed(allowed: [String]) -> APIError {
        var error = APIError(status: .methodNotAllowed, code: .invalidRequest, detail: "Use one of: \(allowed.joined(separator: ", ")).")
        error.allow = allowed.joined(separator: ", ")
        return error
    }

    /// The problem any error is answered with: database and broker outages, and a schema
    /// not yet migrated to this build, become 503 with Retry-After; framework errors keep
    /// their status; anything else is a logged 500.
    public static func problem(for error: any Error, logger: Logger) -> APIError {
        switch error {
        case let error as APIError:
            return error
        case let error as PGError where error.isUnavailable:
            logger.warning("database unavailable", metadata: ["error": "\(error.debugDescription)"])
            return .unavailable("The database is unavailable; retry later.")
        case let error as PGError where error.isSchemaBehind:
            // Not the client's doing and not a bug here: an upgrade whose migration has not
            // run yet. Clients retry; the operator reads the log.
            logger.error("the database schema is older than this build: run syncctl migrate", metadata: [
                "error": "\(error.debugDescription)",
            ])
            return .unavailable("The service is being upgraded; retry later.")
        case let error as PGError where error.code == .invalidText:
            return .unprocessable("Text must not contain the NUL character (\\u0000).")
        case let error as AMQPError:
            logger.warning("broker unavailable", metadata: ["error": "\(error)"])
            return .unavailable("The message broker is unavailable; retry later.")
        case let error as HTTPParserError:
            // A malformed chunked body, met while the route reads it.
            return .malformedHTTP(error)
        case is NIOTooManyBytesError:
            return .tooLarge("The body is larger than 1 MiB.", limit: 1 << 20)
        case let error as HTTPError:
            switch error.status {
            case .notFound: return .notFound()
            case .contentTooLarge:
                return .tooLarge("The body is larger than 1 MiB.", limit: 1 << 20)
            case .methodNotAllowed:
                return APIError(status: .methodNotAllowed, code: .invalidRequest, detail: "Method not allowed.")
            default:
                return APIError(status: error.status, code: error.status.code < 500 ? .invalidRequest : .internalError,
                                detail: error.body ?? error.status.reasonPhrase)
            }
        default:
            logger.error("request failed", metadata: ["error": "\(String(reflecting: error))"])
            return APIError(status: .internalServerError, code: .internalError, detail: "Internal error.")
        }
    }
}

/// JSON responses, encoded the one way the API encodes JSON.
public func jsonResponse<T: Encodable>(_ value: T, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]) throws -> Response {
    var headers = headers
    headers[.contentType] = "application/json"
    return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: try JSONCoding.encode(value))))
}
