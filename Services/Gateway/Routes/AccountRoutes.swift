import Foundation
import HTTPSupport
import HTTPTypes
import Hummingbird
import Operations
import ServiceSupport
import SyncModels

/// `DELETE /v1/me` (the caller's account data goes: App Store guideline 5.1.1(v)) and
/// `GET /v1/me/deletion` (how far it got).
struct AccountRoutes: Sendable {
    let eraser: AccountEraser
    /// How long a deletion may run inside the request before it answers 202 and goes on.
    let inlineBudget: Double
    let background: BackgroundWork

    var routes: RouteCollection<SignedInRequestContext> {
        let routes = RouteCollection(context: SignedInRequestContext.self)
        routes.delete("/v1/me", use: delete)
        routes.get("/v1/me/deletion", use: status)
        return routes
    }

    @Sendable func delete(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        if try await eraser.erase(user: context.user, budget: inlineBudget) { return Response(status: .noContent) }
        // A large account: the rest goes on here, and purge finishes it should this
        // gateway stop first. The answer is read before that starts, so it says what the
        // 202 means: still in progress.
        let eraser = self.eraser, user = context.user, logger = context.logger
        let answer = try await view(user: user)
        let started = background.submit {
            do {
                _ = try await eraser.continueErasing(user: user, budget: .infinity)
            } catch {
                logger.warning("account deletion interrupted; purge will finish it", metadata: ["error": "\(error)"])
            }
        }
        if !started { logger.info("stopping; purge will finish the account deletion") }
        var headers = HTTPFields()
        headers[.location] = "/v1/me/deletion"
        return try jsonResponse(answer, status: .accepted, headers: headers)
    }

    @Sendable func status(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        return try jsonResponse(try await view(user: context.user))
    }

    private func view(user: UserID) async throws -> AccountDeletionView {
        guard let deletion = try await eraser.deletion(user: user) else { throw APIError.notFound("No deletion was requested.") }
        return AccountDeletionView(status: deletion.status.rawValue, requestedAt: deletion.requestedAt, finishedAt: deletion.finishedAt)
    }
}
