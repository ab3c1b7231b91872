import AMQPBridge
import Auth
import BrokerTopology
import Foundation
import HTTPSupport
import Hummingbird
import Persistence
import ServiceSupport
import SyncModels

/// The data API (`/v1/service/…`), for the app's backend with a service token: read a
/// space's records with a query, push ops through the same intake as devices, read the
/// job, create spaces and set their members. A space outside the token's scope answers
/// 404, exactly as one that does not exist; a write with a read-only token is a 403.
struct ServiceRoutes: Sendable {
    /// Its intake, rules and answers serve the data API's pushes too.
    let sync: SyncRoutes
    let records: BackendRecordStore
    let spaces: SpaceStore
    /// Tells fanout whose memberships ended, so their streams of the space end.
    let publisher: AMQPPublisher

    var routes: RouteCollection<ServiceRequestContext> {
        let routes = RouteCollection(context: ServiceRequestContext.self)
        routes.post("/v1/service/spaces", use: createSpace)
        routes.post("/v1/service/spaces/:space_id/query", use: query)
        routes.post("/v1/service/spaces/:space_id/push", use: push)
        routes.get("/v1/service/spaces/:space_id/jobs/:job_id", use: job)
        routes.get("/v1/service/spaces/:space_id/members", use: members)
        routes.put("/v1/service/spaces/:space_id/members/:user_id", use: setMember)
        routes.delete("/v1/service/spaces/:space_id/members/:user_id", use: removeMember)
        return routes
    }

    static let noSpace = APIError.notFound("No such space.")

    /// The space the path names, when the token reaches it; a write needs a token that is
    /// not read-only.
    func space(_ context: ServiceRequestContext, writing: Bool) throws -> SpaceID {
        guard let id = SpaceID(try context.parameters.require("space_id")), context.service.covers(id) else { throw Self.noSpace }
        if writing { try Self.requireWrites(context) }
        return id
    }

    static func requireWrites(_ context: ServiceRequestContext) throws {
        guard !context.service.readOnly else { throw APIError.forbidden("This service token is read-only.") }
    }

    @Sendable func query(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        let space = try space(context, writing: false)
        let query = try await request.dataQuery()
        guard try await spaces.exists(space) else { throw Self.noSpace }
        return try jsonResponse(try await records.query(space: space, query))
    }

    @Sendable func push(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        let space = try space(context, writing: true)
        let service = context.service
        try sync.limiter.check(service.user.text, limit: "push")
        let body = Data(buffer: try await request.body.collect(upTo: Limits.maxBodyBytes))
        var push: PushRequest
        do {
            push = try PushValidation.parse(body, byService: true)
        } catch {
            throw APIError.from(error)
        }
        sync.refuseNamingOpsBeyondBudget(&push.ops, user: service.user)
        let rules = try await sync.rules.rules()
        var intake = JobStore.Intake(
            user: service.user, deviceID: service.device, ops: push.ops, idempotencyKey: try SyncRoutes.idempotencyKey(request),
            requestHash: Digests.sha256Hex(body), traceID: Traces.traceparent() ?? TraceParent.random(),
            maxClockSkewMilliseconds: sync.maxClockSkewMilliseconds, authorName: service.name, spaceID: space, rules: rules)
        intake.asService = true
        let outcome = try await sync.intake.submit(intake)
        return try sync.answer(outcome, rules: rules, space: space) { job, _ in "/v1/service/spaces/\(space)/jobs/\(job)" }
    }

    @Sendable func job(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        let space = try space(context, writing: false)
        guard let id = JobID(try context.parameters.require("job_id")),
              let view = try await sync.jobs.view(user: context.service.user, job: id, space: space)
        else { throw APIError.notFound("No such job.") }
        return try jsonResponse(view)
    }

    /// `{"name", "owner"}`: a shared space owned by the user `owner` (a service is never a member).
    @Sendable func createSpace(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        try Self.requireWrites(context)
        guard context.service.spaces == nil else {
            throw APIError.forbidden("Only a service token for every space may create spaces.")
        }
        let body = try await request.jsonObject()
        guard let name = body["name"]?.stringValue, (1...200).contains(name.unicodeScalars.count), Names.isPlainText(name) else {
            throw APIError.unprocessable("name must be 1 to 200 characters of text.")
        }
        guard let owner = body["owner"]?.stringValue, (1...255).contains(owner.utf8.count), Names.isPlainText(owner),
              !owner.hasPrefix(ServicePrincipal.userPrefix)
        else {
            throw APIError.unprocessable("owner must be the id of the user who will own the space.")
        }
        return try jsonResponse(try await spaces.create(user: UserID(owner), name: name), status: .created)
    }

    @Sendable func members(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        guard let members = try await spaces.members(of: try space(context, writing: false)) else { throw Self.noSpace }
        return try jsonResponse(MemberList(items: members))
    }

    /// `{"role"}`: adds the user with that role, or changes their role.
    @Sendable func setMember(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        let space = try space(context, writing: true)
        let role = try SpaceRoutes.role(try await request.jsonObject()["role"])
        let member = try Self.member(context)
        try await change(member, in: space, to: role, context: context)
        guard let view = try await spaces.members(of: space)?.first(where: { $0.userID == member.text }) else { throw Self.noSpace }
        return try jsonResponse(view)
    }

    @Sendable func removeMember(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        let space = try space(context, writing: true)
        let member = try Self.member(context)
        try await change(member, in: space, to: nil, context: context)
        await publisher.announce([SpaceLeftEvent(userID: member, spaceID: space)], logger: context.logger)
        return Response(status: .noContent)
    }

    static func member(_ context: ServiceRequestContext) throws -> UserID {
        let text = try context.parameters.require("user_id")
        guard (1...255).contains(text.utf8.count), !text.hasPrefix(ServicePrincipal.userPrefix) else {
            throw APIError.notFound("No such member.")
        }
        return UserID(text)
    }

    func change(_ member: UserID, in space: SpaceID, to role: SpaceRole?, context: ServiceRequestContext) async throws {
        let (change, version) = try await spaces.setMember(space: space, member: member, to: role)
        switch change {
        case .done: break
        case .notFound: throw APIError.notFound("No such space or member.")
        case .forbidden: throw APIError.forbidden("A personal space takes no members.")
        case .lastOwner:
            throw APIError(
                status: .conflict, code: .invalidRequest,
                detail: "The last owner cannot leave or stop being owner; make another member owner first.")
        case .tooManyInvitations: throw APIError.forbidden("Your role in this space does not allow that.")
        }
        context.logger.info("membership changed", metadata: [
            "space.id": "\(space)", "member.user_id": "\(member)", "member.role": "\(role?.rawValue ?? "removed")",
            "space.version": "\(version ?? 0)", "service.token_id": "\(context.service.id)",
        ])
    }
}
