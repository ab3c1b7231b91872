import AMQPBridge
import Auth
import Foundation
import HTTPSupport
import HTTPTypes
import Hummingbird
import Logging
import Metrics
import Persistence
import ServiceSupport
import SyncModels

/// `POST /v1/sync/push`, `GET /v1/sync/jobs/{job_id}`, `GET /v1/sync/pull`.
struct SyncRoutes: Sendable {
    let jobs: JobStore
    let spaces: SpaceStore
    /// Commits and announces each push's job, together with the pushes alongside it.
    let intake: IntakeBatcher
    let maxClockSkewMilliseconds: Int64
    /// The app's rules, which screen each op by the pusher's role at intake.
    let rules: RulesCache
    let limiter: RateLimiter
    /// Publish and fork ops, a token each: a public id's existence costs a guesser as
    /// much here as through `GET /v1/public/{public_id}`. An op beyond the budget is
    /// `rejected` (`rate_limited`) without its id being looked up, whether it is taken or not.
    let publicIDLimiter: RateLimiter
    /// Where pulls that name their device reached (for the support console).
    let pullMarks: PullMarks
    /// The next page of each pull, read while the device takes in this one.
    let readAhead: PullReadAhead
    let compression = ResponseCompression()

    private let pushes = Counter(label: "syncline_pushes_total")
    private let pushedOps = Counter(label: "syncline_pushed_ops_total")

    init(
        jobs: JobStore, pulls: PullStore, spaces: SpaceStore, intake: IntakeBatcher,
        maxClockSkewMilliseconds: Int64, rules: RulesCache, limiter: RateLimiter, publicIDLimiter: RateLimiter,
        pullMarks: PullMarks, readAhead: Int
    ) {
        self.readAhead = PullReadAhead(capacity: readAhead) { key in
            try await pulls.pull(
                user: key.user, space: key.space, since: key.since, limit: key.limit, collections: key.collections,
                minCursor: key.minCursor, form: key.form)
        }
        self.pullMarks = pullMarks
        self.rules = rules
        self.spaces = spaces
        self.limiter = limiter
        self.publicIDLimiter = publicIDLimiter
        self.intake = intake
        self.jobs = jobs
        self.maxClockSkewMilliseconds = maxClockSkewMilliseconds
    }

    var routes: RouteCollection<SignedInRequestContext> {
        let routes = RouteCollection(context: SignedInRequestContext.self)
        routes.post("/v1/sync/push", use: push)
        routes.get("/v1/sync/jobs/:job_id", use: job)
        routes.get("/v1/sync/pull", use: pull)
        return routes
    }

    @Sendable func push(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        try limiter.check(context.user.text, limit: "push")
        let body = Data(buffer: try await request.body.collect(upTo: Limits.maxBodyBytes))
        var push: PushRequest
        do {
            push = try PushValidation.parse(body)
        } catch {
            throw APIError.from(error)
        }
        // The device and the role in the space are checked by the intake, under the
        // user's clock lock.
        refuseNamingOpsBeyondBudget(&push.ops, user: context.user)
        let key = try Self.idempotencyKey(request)
        // An id that is no UUID names no device: answered as the intake answers an unknown one.
        guard let device = DeviceID(push.deviceID) else { throw APIError.notFound("No such device.") }
        let rules = try await self.rules.rules()
        let outcome = try await intake.submit(JobStore.Intake(
            user: context.user, deviceID: device, ops: push.ops,
            idempotencyKey: key, requestHash: Digests.sha256Hex(body), traceID: Traces.traceparent() ?? TraceParent.random(),
            maxClockSkewMilliseconds: maxClockSkewMilliseconds, authorName: context.identity.name,
            spaceID: push.spaceID, rules: rules))
        return try answer(outcome, rules: rules, space: push.spaceID) { "/v1/sync/jobs/\($0)" + ($1.map { "?space_id=\($0)" } ?? "") }
    }

    /// The answer to an intake's outcome: 202 with the job (`location` gives its status's
    /// address from its id and space), or the problem that refused it.
    func answer(
        _ outcome: JobStore.IntakeOutcome, rules: Rules, space: SpaceID?, location: (JobID, SpaceID?) -> String
    ) throws -> Response {
        if let problem = Self.problem(refusing: outcome, rulesVersion: rules.version) { throw problem }
        switch outcome {
        case .existing(let jobID, let status, let ops):
            return try accepted(PushAccepted(jobID: jobID.description, status: status, ops: ops), location: location(jobID, space))
        case .created(let job, let ops):
            pushes.increment()
            pushedOps.increment(by: ops)
            return try accepted(
                PushAccepted(jobID: job.job.description, status: .queued, ops: ops), location: location(job.job, job.space))
        default:
            throw UnexpectedAnswer("an intake's refusal without its problem: \(outcome)")
        }
    }

    /// The problem a push the intake refused is answered with (nil: it was taken), judged
    /// by rules of version `rulesVersion`. The conformance vectors' push answers come from
    /// here, so both clients are held to what the gateway says.
    static func problem(refusing outcome: JobStore.IntakeOutcome, rulesVersion: Int64) -> APIError? {
        switch outcome {
        case .created, .existing:
            return nil
        case .keyReused:
            return APIError.unprocessable("This Idempotency-Key was used with a different body.")
        case .deviceNotFound:
            return APIError.notFound("No such device.")
        case .deviceRevoked:
            return APIError.forbidden("This device was revoked.")
        case .spaceNotFound:
            return APIError.notFound("No such space.")
        case .spaceReadOnly:
            return APIError.forbidden("A viewer of this space cannot push to it.")
        case .blobMissing(let op, let sha256):
            var error = APIError(
                status: .conflict, code: .blobMissing,
                detail: "The op references the file \(sha256), which the space does not hold: upload it first.")
            error.opIndex = op
            error.pointer = "/ops/\(op)/data"
            error.sha256 = sha256
            return error
        case .ruleRefused(let op, let refusal):
            return APIError.ruleRefused(refusal, op: op, version: rulesVersion)
        }
    }

    /// The Idempotency-Key header: 1 to 255 visible ASCII characters, or none.
    static func idempotencyKey(_ request: Request) throws -> String? {
        let key = request.headers[.idempotencyKey]
        if let key, !(1...255).contains(key.utf8.count) || !key.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) {
            throw APIError.badRequest("Idempotency-Key must be 1 to 255 visible ASCII characters.")
        }
        return key
    }

    /// Takes a token of the user's public-id budget for each publish and fork op, in
    /// order; the ops it has no token for are rejected as `rate_limited`.
    func refuseNamingOpsBeyondBudget(_ ops: inout [Op], user: UserID) {
        let naming = ops.indices.filter { ops[$0].type == .publish || ops[$0].type == .fork }
        guard !naming.isEmpty else { return }
        let allowed = publicIDLimiter.take(user.text, upTo: naming.count)
        guard allowed < naming.count else { return }
        for index in naming[allowed...] { ops[index].rejected = RejectReason.rateLimited }
        Counter(label: "syncline_rate_limited_total", dimensions: [("limit", "public_ids")])
            .increment(by: naming.count - allowed)
    }

    /// 202 with the job, and its status's address (with the space when it is known, so
    /// that the status is read from that space alone).
    private func accepted(_ body: PushAccepted, location: String) throws -> Response {
        var headers = HTTPFields()
        headers[.location] = location
        return try jsonResponse(body, status: .accepted, headers: headers)
    }

    @Sendable func job(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let id = JobID(try context.parameters.require("job_id"))
        let space = try request.spaceParameter()
        guard let id, let view = try await jobs.view(user: context.user, job: id, space: space) else {
            throw APIError.notFound("No such job.")
        }
        return try compression.json(view, for: request)
    }

    @Sendable func pull(_ request: Request, context: SignedInRequestContext) async throws -> Response {
        let query = request.uri.queryParameters
        let since = try request.cursorParameter("since", from: "an earlier pull") ?? 0
        let minCursor = try request.cursorParameter("min_cursor", from: "a job's checkpoint or a poke")
        let limit = try request.integerParameter("limit", in: 1...10_000, default: 500)
        var collections: [String]?
        if let text = query["collections"].map(String.init) {
            let names = text.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
            guard names.allSatisfy(Names.isValidCollection) else {
                throw APIError.badRequest("collections must be a comma-separated list of collection names.")
            }
            collections = names
        }
        let space = try request.spaceParameter()
        var device: DeviceID?
        if let text = query["device_id"] {
            guard let id = DeviceID(text) else { throw APIError.badRequest("device_id must be a device's id.") }
            device = id
        }
        var form = PullForm.full
        if let text = query["form"] {
            guard let named = PullForm(rawValue: String(text)) else { throw APIError.badRequest("form must be full or compact.") }
            form = named
        }
        if let space, try await spaces.role(user: context.user, space: space) == nil { throw APIError.notFound("No such space.") }
        let key = PullReadAhead.Key(
            user: context.user, space: space, since: since, limit: limit, collections: collections, minCursor: minCursor,
            form: form)
        switch try await readAhead.page(key) {
        case .page(let page):
            readAhead.readAhead(from: page.hasMore ? Int64(page.cursor) : nil, of: key)
            if let device, let cursor = Int64(page.cursor) {
                pullMarks.note(.init(device: device, user: context.user, space: space, cursor: cursor, collections: collections))
            }
            return compression.json(ByteBuffer(bytes: page.json), for: request)
        case .resyncRequired:
            throw APIError(status: .gone, code: .resyncRequired, detail: "This cursor is older than the retention; pull from the start.")
        }
    }
}

extension HTTPField.Name {
    static let idempotencyKey = HTTPField.Name("Idempotency-Key")!
    static let xFrameOptions = HTTPField.Name("X-Frame-Options")!
    static let referrerPolicy = HTTPField.Name("Referrer-Policy")!
}
