import AMQPBridge
import BlobStorage
import Auth
import BrokerTopology
import Foundation
import HTTPSupport
import Hummingbird
import Persistence
import ServiceSupport
import SyncModels

/// Shared spaces: `/v1/spaces…` and `POST /v1/invitations/{code}/accept`. A space the
/// caller is no member of answers 404, exactly like one that does not exist (isolation).
struct SpaceRoutes: Sendable {
    let spaces: SpaceStore
    /// Tells fanout whose memberships ended, so streams narrowed to the space end.
    let publisher: AMQPPublisher
    /// Removes a deleted space's files from their store, after the answer.
    let sweeper: BlobSweeper
    let background: BackgroundWork
    /// Open invitations a space may hold at once (`MAX_OPEN_INVITATIONS`).
    let maxOpenInvitations: Int

    static let defaultInvitationSeconds = 7 * 24 * 3600
    static let maxInvitationSeconds = 30 * 24 * 3600

    var routes: RouteCollection<SignedInRequestContext> {
        let routes = RouteCollection(context: SignedInRequestContext.self)
        routes.post("/v1/spaces", use: create)
        routes.get("/v1/spaces", use: list)
        routes.delete("/v1/spaces/:space_id", use: delete)
        routes.get("/v1/spaces/:space_id/members", use: members)
        routes.patch("/v1/spaces/:space_id/members/:user_id", use: setRole)
        routes.delete("/v1/spaces/:space_id/members/:user_id", use: remove)
        routes.post("/v1/spaces/:space_id/invitations", use: invite)
        routes.get("/v1/spaces/:space_id/invitations", use: invitations)
        routes.delete("/v1/spaces/:space_id/invitations/:invitation_id", use: revokeInvitation)
        routes.post("/v1/invitations/:code/accept", use: accept)
        return routes
    }

    static func role(_ value: JSONValue?) throws -> SpaceRole {
        guard let text = value?.stringValue, let role = SpaceRole(rawValue: text), SpaceRole.memberRoles.contains(role) else {
            throw APIError.unprocessable("role must be owner, editor or viewer.")
        }
        return role
    }

    static let notFound = APIError.notFound("No such space, member or invitation.")

    /// The space the path names. An id that is no UUID names no space: it is answered as
    /// one the store does not hold.
    func pathSpace(_ context: SignedInRequestContext) throws -> SpaceID {
        guard let id = SpaceID(try context.parameters.require("space_id")) else { throw Self.notFound }
        return id
    }

    func answer(_ change: SpaceStore.Change) throws {
        switch change {
        case .done: return
        case .notFound: throw Self.notFound
        case .forbidden: throw APIError.forbidden("Your role in this space does not allow that.")
        case .lastOwner:
            throw APIError(
                status: .conflict, code: .invalidRequest,
                detail: "The last owner cannot leave or stop being owner; make another member owner first.")
        case .tooManyInvitations:
            throw APIError.tooMany(
                "This space has as many open invitations as it may; revoke one, or wait for one to be used or expire.",
                limit: maxOpenInvitations)
        }
    }

    @Sendable func create(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let body = try await request.jsonObject()
        guard let name = body["name"]?.stringValue, (1...200).contains(name.unicodeScalars.count), Names.isPlainText(name) else {
            throw APIError.unprocessable("name must be 1 to 200 characters of text.")
        }
        return try jsonResponse(try await spaces.create(user: context.user, name: name), status: .created)
    }

    @Sendable func list(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        return try jsonResponse(SpaceList(items: try await spaces.list(user: context.user)))
    }

    @Sendable func delete(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let space = try pathSpace(context)
        let (change, members) = try await spaces.delete(user: context.user, space: space)
        try answer(change)
        await publisher.announce(members.map { SpaceLeftEvent(userID: $0, spaceID: space) }, logger: context.logger)
        let logger = context.logger
        _ = background.submit { [sweeper] in
            do { try await sweeper.sweep() } catch { logger.warning("files of a deleted space wait for purge", metadata: ["error": "\(error)"]) }
        }
        return Response(status: .noContent)
    }

    @Sendable func members(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        guard let space = SpaceID(try context.parameters.require("space_id")), let members = try await spaces.members(user: context.user, space: space) else {
            throw APIError.notFound("No such space.")
        }
        return try jsonResponse(MemberList(items: members))
    }

    @Sendable func setRole(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let role = try Self.role(try await request.jsonObject()["role"])
        let space = try pathSpace(context), member = UserID(try context.parameters.require("user_id"))
        try await changeMember(member, in: space, to: role, context: context)
        guard let view = try await spaces.members(user: context.user, space: space)?.first(where: { $0.userID == member.text }) else {
            throw Self.notFound
        }
        return try jsonResponse(view)
    }

    /// Changes a member's role, or removes them (nil), and logs the space's version at the
    /// change: ops of theirs above it were judged by the new role (a support question).
    func changeMember(_ member: UserID, in space: SpaceID, to role: SpaceRole?, context: SignedInRequestContext) async throws {
        let (change, version) = try await spaces.change(user: context.user, space: space, member: member, to: role)
        try answer(change)
        context.logger.info("membership changed", metadata: [
            "space.id": "\(space)", "member.user_id": "\(member)", "member.role": "\(role?.rawValue ?? "removed")",
            "space.version": "\(version ?? 0)",
        ])
    }

    @Sendable func remove(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let space = try pathSpace(context), member = UserID(try context.parameters.require("user_id"))
        try await changeMember(member, in: space, to: nil, context: context)
        await publisher.announce([SpaceLeftEvent(userID: member, spaceID: space)], logger: context.logger)
        return Response(status: .noContent)
    }

    @Sendable func invite(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let body = try await request.jsonObject()
        let role = try Self.role(body["role"])
        var seconds = Self.defaultInvitationSeconds
        if let value = body["expires_in"], !value.isNull {
            guard let number = value.intValue, (60...Int64(Self.maxInvitationSeconds)).contains(number) else {
                throw APIError.unprocessable("expires_in must be 60 to \(Self.maxInvitationSeconds) seconds.")
            }
            seconds = Int(number)
        }
        let (change, invitation) = try await spaces.invite(
            user: context.user, space: try pathSpace(context), role: role, seconds: seconds,
            code: Secrets.random(), maxOpen: maxOpenInvitations)
        try answer(change)
        guard let invitation else { throw APIError.notFound("No such space.") }
        return try jsonResponse(invitation, status: .created)
    }

    @Sendable func invitations(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let limit = try request.integerParameter("limit", in: 1...500, default: 100)
        var cursor: PageCursor?
        if let text = request.uri.queryParameters["cursor"].map(String.init) {
            guard let parsed = PageCursor(text: text) else { throw APIError.badRequest("cursor must be a next_cursor from an earlier page.") }
            cursor = parsed
        }
        let (change, page) = try await spaces.invitations(
            user: context.user, space: try pathSpace(context), limit: limit, cursor: cursor)
        try answer(change)
        return try jsonResponse(page)
    }

    @Sendable func revokeInvitation(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        try answer(try await spaces.revokeInvitation(
            user: context.user, space: try pathSpace(context), invitation: try context.parameters.require("invitation_id")))
        return Response(status: .noContent)
    }

    @Sendable func accept(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let code = try context.parameters.require("code")
        guard code.utf8.count <= 100, let joined = try await spaces.accept(user: context.user, code: code) else {
            throw APIError.notFound("No such invitation, or it was used or has expired.")
        }
        return try jsonResponse(JoinedSpace(spaceID: joined.space.description, role: joined.role))
    }
}
