import Foundation
import HTTPSupport
import Hummingbird
import Persistence
import SyncModels

/// The support console's API, behind `AdminOnlyMiddleware`: a user, a device, a job by id
/// or trace id, a space, its records (with field clocks), a record's history, and "why
/// doesn't this device have that record". Record data is shown only to admins whose token
/// has the support scope (403 otherwise), and every read is written to the audit log with
/// the user whose data it was.
struct SupportRoutes: Sendable {
    let store: SupportStore
    let records: BackendRecordStore
    let audit: AuditStore

    var routes: RouteCollection<SignedInRequestContext> {
        let routes = RouteCollection(context: SignedInRequestContext.self)
        routes.get("/v1/admin/support/user", use: user)
        routes.get("/v1/admin/support/devices/:device_id", use: device)
        routes.get("/v1/admin/support/jobs/:job", use: job)
        routes.get("/v1/admin/support/spaces/:space_id", use: space)
        routes.post("/v1/admin/support/spaces/:space_id/records", use: browse)
        routes.get("/v1/admin/support/spaces/:space_id/record", use: record)
        routes.get("/v1/admin/support/why", use: why)
        return routes
    }

    @Sendable func user(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        guard let id = try request.textParameter("user_id", maxLength: Limits.maxUserIDLength) else {
            throw APIError.badRequest("user_id is required.")
        }
        guard let view = try await store.user(UserID(id)) else { throw APIError.notFound("No such user: no devices and no spaces.") }
        try await audited(context, "support.user", target: "user:\(id)", subject: id)
        return try jsonResponse(view)
    }

    @Sendable func device(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        guard let id = DeviceID(try context.parameters.require("device_id")), let (user, view) = try await store.device(id) else {
            throw APIError.notFound("No such device.")
        }
        try await audited(context, "support.device", target: "device:\(id)", subject: user.text)
        return try jsonResponse(view)
    }

    @Sendable func job(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let key = try context.parameters.require("job")
        guard (1...128).contains(key.count), Names.isPlainText(key), let view = try await store.job(key) else {
            throw APIError.notFound("No job has this id or trace id (jobs are kept for JOB_RETENTION).")
        }
        try await audited(context, "support.job", target: "job:\(key)", subject: view.objectValue?["user_id"]?.stringValue)
        return try jsonResponse(view)
    }

    @Sendable func space(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let id = try space(context)
        guard let (owners, view) = try await store.space(id) else { throw Self.noSpace }
        try await audited(context, "support.space", target: "space:\(id)", subject: owners.first)
        return try jsonResponse(view)
    }

    /// A page of a space's records (a data query), each with its field clocks and author.
    @Sendable func browse(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        try Self.requireSupport(context)
        let id = try space(context)
        let query = try await request.dataQuery()
        guard let owners = try await store.owners(of: id) else { throw Self.noSpace }
        let page = try await records.query(space: id, query, idOrder: .index)
        let clocks = try await store.clocks(space: id, collection: query.collection, ids: page.records.map(\.id))
        let items = try page.records.map { try SupportStore.detail($0, clocks: clocks[$0.id]) }
        try await audited(
            context, "support.records", target: "space:\(id)/\(query.collection)", subject: owners.first, count: items.count)
        return try jsonResponse(JSONValue.object([
            "records": .array(items), "next_cursor": page.nextCursor.map(JSONValue.string) ?? .null,
        ]))
    }

    /// A record with its field clocks, and the jobs kept that named it with their ops' results.
    @Sendable func record(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        try Self.requireSupport(context)
        let id = try space(context)
        let (collection, recordID) = try Self.recordParameters(request)
        guard let owners = try await store.owners(of: id) else { throw Self.noSpace }
        let record = try await store.record(space: id, collection: collection, id: recordID)
        let history = try await store.history(space: id, collection: collection, id: recordID)
        guard record != nil || !history.isEmpty else { throw APIError.notFound("The space holds no such record and no job kept names it.") }
        try await audited(context, "support.record", target: "record:\(id)/\(collection)/\(recordID)", subject: owners.first)
        return try jsonResponse(JSONValue.object([
            "record": record ?? .null,
            "history": .array(history.map { job in
                .object([
                    "job_id": .string(job.jobID), "user_id": .string(job.userID), "device_id": .string(job.deviceID),
                    "status": .string(job.status), "attempts": .int(Int64(job.attempts)),
                    "trace_id": job.traceID.map(JSONValue.string) ?? .null, "last_error": job.lastError.map(JSONValue.string) ?? .null,
                    "created_at": .string(job.createdAt), "finished_at": job.finishedAt.map(JSONValue.string) ?? .null,
                    "ops": .array(job.ops.map { SupportStore.opView($0.op, result: $0.result, withData: true) }),
                ])
            }),
            "kept_since": try await store.oldestJobKept(space: id).map(JSONValue.string) ?? .null,
        ]))
    }

    /// "Why doesn't device D have record R": the first cause that holds, and the facts.
    @Sendable func why(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        guard let text = request.uri.queryParameters["device_id"], let device = DeviceID(text) else {
            throw APIError.badRequest("device_id must be a device's id.")
        }
        guard let spaceText = request.uri.queryParameters["space_id"], let space = SpaceID(spaceText) else {
            throw APIError.badRequest("space_id must be a space's id.")
        }
        let (collection, recordID) = try Self.recordParameters(request)
        guard try await store.owners(of: space) != nil else { throw Self.noSpace }
        guard let (user, facts) = try await store.facts(device: device, space: space, collection: collection, id: recordID) else {
            throw APIError.notFound("No such device.")
        }
        let answer = MissingRecordAnswer(facts)
        try await audited(context, "support.why", target: "record:\(space)/\(collection)/\(recordID) device:\(device)", subject: user.text)
        return try jsonResponse(JSONValue.object([
            "cause": .string(answer.cause.rawValue), "detail": .string(answer.detail),
            "facts": .object([
                "device_revoked": .bool(facts.deviceRevoked), "member": .bool(facts.isMember),
                "record_version": facts.record.map { .string(String($0.version)) } ?? .null,
                "record_deleted": facts.record.map { .bool($0.deleted) } ?? .null,
                "purge_horizon": .string(String(facts.purgeHorizon)),
                "device_cursor": facts.cursor.map { .string(String($0.cursor)) } ?? .null,
                "pulled_at": facts.cursor.map { .string($0.pulledAt) } ?? .null,
                "open_streams": .int(Int64(facts.openStreams)),
                "newest_job": facts.newestJob.map { job in
                    .object([
                        "job_id": .string(job.jobID), "status": .string(job.status), "op_type": .string(job.opType),
                        "result": job.result.map(JSONValue.string) ?? .null, "reason": job.reason.map(JSONValue.string) ?? .null,
                        "rule": job.rule.map(JSONValue.string) ?? .null,
                    ])
                } ?? .null,
            ]),
        ]))
    }

    static let noSpace = APIError.notFound("No such space.")

    private func space(_ context: SignedInRequestContext) throws -> SpaceID {
        guard let id = SpaceID(try context.parameters.require("space_id")) else { throw Self.noSpace }
        return id
    }

    /// `collection` and `id` query parameters naming a record.
    static func recordParameters(_ request: Request) throws -> (String, String) {
        guard let collection = request.uri.queryParameters["collection"].map(String.init), Names.isValidCollection(collection) else {
            throw APIError.badRequest("collection must be a collection name.")
        }
        guard let id = request.uri.queryParameters["id"].map(String.init), Names.isValidRecordID(id) else {
            throw APIError.badRequest("id must be a record id.")
        }
        return (collection, id)
    }

    static func requireSupport(_ context: SignedInRequestContext) throws {
        guard context.identity.isSupport else {
            throw APIError.forbidden("Record data needs an admin token with the support scope.")
        }
    }

    /// Writes the read to the audit log before it is answered: a read that cannot be
    /// audited is not answered.
    private func audited(_ context: SignedInRequestContext, _ action: String, target: String, subject: String?, count: Int = 1) async throws {
        try await audit.record(actor: context.user.text, action: action, target: target, subject: subject, count: count)
    }
}
