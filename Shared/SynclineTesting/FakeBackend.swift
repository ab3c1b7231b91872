import Crypto
import Foundation
import SyncModels

/// A request as the fake server reads it.
struct FakeRequest: Sendable {
    let method: String
    let path: String
    let query: [String: String]
    let headers: [String: String]
    let body: Data

    init(method: String, uri: String, headers: [String: String], body: Data) {
        self.method = method
        let components = URLComponents(string: uri)
        path = components?.percentEncodedPath ?? uri
        var query: [String: String] = [:]
        for item in components?.queryItems ?? [] { query[item.name] = item.value ?? "" }
        self.query = query
        var lowercased: [String: String] = [:]
        for (name, value) in headers { lowercased[name.lowercased()] = value }
        self.headers = lowercased
        self.body = body
    }

    /// The bearer token, read: the fake takes it as the user's id, then (as
    /// `FakeSyncServer.configuration` issues them) `#` and the token's generation.
    var token: FakeToken? {
        guard let value = headers["authorization"], value.hasPrefix("Bearer ") else { return nil }
        return FakeToken(String(value.dropFirst(7)))
    }

    var user: String? { token?.user }

    /// The path's segments after the leading slash.
    var segments: [String] { path.split(separator: "/").map { String($0).removingPercentEncoding ?? String($0) } }
}

/// A bearer token of the fake server: `user`, or `user#generation` as it issues them.
struct FakeToken: Sendable, Equatable {
    let user: String
    let generation: Int

    init?(_ text: String) {
        let parts = text.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
        guard let user = parts.first, !user.isEmpty else { return nil }
        self.user = user
        generation = parts.count == 2 ? Int(parts[1]) ?? 0 : 0
    }

    init(user: String, generation: Int) {
        (self.user, self.generation) = (user, generation)
    }

    var text: String { "\(user)#\(generation)" }
}

/// An answer of the fake server.
struct FakeAnswer: Sendable {
    var status: Int
    var headers: [String: String] = [:]
    var body = Data()

    static func json(_ status: Int, _ value: some Encodable) -> FakeAnswer {
        FakeAnswer(status: status, headers: ["Content-Type": "application/json"], body: (try? JSONCoding.encode(value)) ?? Data())
    }

    static func json(_ status: Int, _ value: JSONValue) -> FakeAnswer {
        FakeAnswer(status: status, headers: ["Content-Type": "application/json"], body: Data(JSONWriter.bytes(value)))
    }

    /// `application/problem+json`, with the members the clients act on.
    static func problem(_ status: Int, _ code: String, _ detail: String, members: [String: JSONValue] = [:]) -> FakeAnswer {
        var fields = members
        fields["type"] = .string("about:blank")
        fields["title"] = .string(code.replacingOccurrences(of: "_", with: " ").capitalized)
        fields["status"] = .int(Int64(status))
        fields["code"] = .string(code)
        fields["detail"] = .string(detail)
        return FakeAnswer(
            status: status, headers: ["Content-Type": "application/problem+json"], body: Data(JSONWriter.bytes(.object(fields))))
    }

    static let noContent = FakeAnswer(status: 204)

    /// A body that is not JSON, answered as the gateway does.
    static let notJSON = problem(400, "invalid_request", "The request body is not valid JSON.")
}

/// What a stream is told: JSON objects, one per event.
struct StreamMessage: Sendable {
    let json: JSONValue

    var event: String { "data: \(JSONWriter.string(json))\n\n" }
}

/// Everything the fake server holds, and how it answers: the gateway's API over memory,
/// with the server's own validation, clock and merge rules (`PushValidation`, `HLCState`,
/// `JobApplier`). Not thread-safe: `FakeSyncServer` holds it under a lock.
struct FakeBackend {
    struct Space {
        let id: String
        var name: String
        let personalOf: String?
        var members: [String: SpaceRole]
        var records: [RecordKey: StoredRecord] = [:]
        var knownOpIDs: Set<String> = []
        var counter: Int64 = 0
        var blobs: [String: Data] = [:]
        let createdAt = Timestamp.format(Date())
    }

    struct Job {
        let id: String
        let user: String
        let device: String
        let space: String
        let ops: [Op]
        var status: JobStatus = .queued
        var results: [OpResult] = []
        var checkpoint: Int64?
        let createdAt = Timestamp.format(Date())
        var finishedAt: String?
        var lastError: String?

        var view: JobView {
            JobView(
                jobID: id, status: status, attempts: status == .queued ? 0 : 1, attemptLog: [], createdAt: createdAt,
                finishedAt: finishedAt, lastError: lastError, checkpoint: checkpoint.map(String.init), results: results,
                spaceID: space)
        }
    }

    struct Stream {
        let user: String
        let device: String
        /// The one space it is narrowed to; nil: every space of the user.
        let space: String?
    }

    /// A message for the streams `to` selects; nil ends them.
    struct Delivery {
        let to: @Sendable (Stream) -> Bool
        let message: StreamMessage?
    }

    var devices: [String: String] = [:]
    /// The ops each device reported it set aside (op id → reason), as the server keeps them for support.
    var setAsideReports: [String: [String: String]] = [:]
    var spaces: [String: Space] = [:]
    var personalSpaces: [String: String] = [:]
    var jobs: [String: Job] = [:]
    var queued: [String] = []
    var idempotencyKeys: [String: (job: String, body: Data)] = [:]
    var clocks: [String: HLCState] = [:]
    var refusal: (@Sendable (Op) -> Refusal?)?
    /// Why a job is dead-lettered instead of applied (nil: it is applied).
    var deadLetter: (@Sendable ([Op]) -> String?)?
    var unavailable = false
    var jobsPaused = false
    /// Requests still to answer 429, and the `Retry-After` they carry.
    var throttled: (count: Int, retryAfter: Int) = (0, 0)
    /// Tokens issued (the last generation), the oldest generation of each user's that is
    /// not expired, the users whose every token is refused, and each user's refreshes.
    var tokenGeneration = 0
    var validFrom: [String: Int] = [:]
    var signedOut: Set<String> = []
    var refreshes: [String: Int] = [:]
    var issued: [String: Int] = [:]
    var invitations: [String: Invitation] = [:]
    var uploads: [String: Upload] = [:]
    /// How far ahead of the server's clock an op's own may be.
    let maxClockSkewMilliseconds: Int64 = 5 * 60_000

    /// The token a client's provider gives: the one issued before, or a fresh one when
    /// asked to refresh (or when none was issued).
    mutating func token(user: String, client: String, refresh: Bool) -> String {
        let key = "\(user) \(client)"
        if refresh { refreshes[user, default: 0] += 1 }
        if refresh || issued[key] == nil {
            tokenGeneration += 1
            issued[key] = tokenGeneration
        }
        return FakeToken(user: user, generation: issued[key] ?? 0).text
    }

    // MARK: - Spaces

    mutating func personalSpace(of user: String) -> String {
        if let id = personalSpaces[user] { return id }
        let id = UUID().uuidString.lowercased()
        spaces[id] = Space(id: id, name: "Personal", personalOf: user, members: [user: .owner])
        personalSpaces[user] = id
        return id
    }

    mutating func createSpace(name: String, owner: String) -> String {
        let id = UUID().uuidString.lowercased()
        spaces[id] = Space(id: id, name: name, personalOf: nil, members: [owner: .owner])
        return id
    }

    /// The space a request names (`space_id`, else the user's personal one) when the user
    /// is a member of it.
    mutating func space(_ named: String?, of user: String) -> String? {
        guard let named else { return personalSpace(of: user) }
        let id = Names.canonicalUUID(named) ?? named
        return spaces[id]?.members[user] == nil ? nil : id
    }

    func view(of space: Space, for user: String) -> SpaceView? {
        guard let role = space.members[user] else { return nil }
        return SpaceView(spaceID: space.id, name: space.name, role: role, personal: space.personalOf != nil, createdAt: space.createdAt)
    }

    // MARK: - Requests

    /// Answers a request other than a stream; `deliveries` are for the open streams.
    mutating func answer(_ request: FakeRequest, deliveries: inout [Delivery]) -> FakeAnswer {
        if let refused = turnedAway(request) { return refused }
        guard let user = request.user else { return .problem(401, "unauthorized", "A bearer token is required.") }
        if throttled.count > 0 {
            throttled.count -= 1
            var answer = FakeAnswer.problem(429, "rate_limited", "Too many requests (the test made it so).")
            answer.headers["Retry-After"] = String(throttled.retryAfter)
            return answer
        }
        let (route, named) = Self.route(request.segments)
        if let answer = answerSpaces(request, route: route, named: named, user: user, deliveries: &deliveries) { return answer }
        if let answer = answerUploads(request, route: route, named: named, user: user) { return answer }
        switch (request.method, route) {
        case ("POST", "/v1/devices"):
            if let refused = Self.refusedRegistration(request.body) { return refused }
            let id = UUID().uuidString.lowercased()
            devices[id] = user
            return .json(201, .object(["device_id": .string(id)]))
        case ("POST", "/v1/devices/:id/set-aside"):
            // As the gateway: the body first, then the device.
            guard let body = try? JSONParser.parse(request.body) else { return .notJSON }
            guard let ops = body.objectValue?["ops"]?.arrayValue else {
                return .problem(422, "invalid_request", "ops must be an array.")
            }
            guard devices[Names.canonicalUUID(named) ?? named] == user else { return .problem(404, "not_found", "No such device.") }
            for op in ops {
                guard let opID = op.objectValue?["op_id"]?.stringValue, let reason = op.objectValue?["reason"]?.stringValue else {
                    return .problem(422, "invalid_request", "Each op needs op_id and reason.")
                }
                setAsideReports[named, default: [:]][opID] = reason
            }
            return FakeAnswer(status: 204)
        case ("POST", "/v1/sync/push"):
            return push(request, user: user, deliveries: &deliveries)
        case ("GET", "/v1/sync/jobs/:id"):
            guard let job = jobs[named], job.user == user else { return .problem(404, "not_found", "No such job.") }
            return .json(200, job.view)
        case ("GET", "/v1/sync/pull"):
            return pull(request, user: user)
        case ("GET", "/v1/spaces"):
            let views = spaces.values.sorted { $0.createdAt < $1.createdAt }.compactMap { view(of: $0, for: user) }
            return .json(200, SpaceList(items: views))
        case ("POST", "/v1/spaces"):
            guard let body = try? JSONParser.parse(request.body) else { return .notJSON }
            guard let name = body.objectValue?["name"]?.stringValue, !name.isEmpty else {
                return .problem(422, "invalid_request", "name must be a non-empty string.", members: ["pointer": "/name"])
            }
            let id = createSpace(name: name, owner: user)
            return .json(201, view(of: spaces[id]!, for: user)!)
        case ("DELETE", "/v1/spaces/:id"):
            guard let space = spaces[Names.canonicalUUID(named) ?? named], let role = space.members[user] else {
                return .problem(404, "not_found", "No such space.")
            }
            guard role == .owner, space.personalOf == nil else {
                return .problem(403, "forbidden", "Only the owner deletes a space, and never a personal one.")
            }
            deleteSpace(space.id, &deliveries)
            return .noContent
        case ("PUT", "/v1/blobs/:id"):
            return putBlob(request, sha256: named, user: user)
        case ("GET", "/v1/blobs/:id"):
            guard BlobReference.isValidSHA256(named) else {
                return .problem(400, "invalid_request", "A file is named by its SHA-256: 64 lowercase hex digits.")
            }
            guard let id = space(request.query["space_id"], of: user), let data = spaces[id]?.blobs[named] else {
                return .problem(404, "not_found", "No such file.")
            }
            return FakeAnswer(status: 200, headers: ["Content-Type": "application/octet-stream"], body: data)
        default:
            return .problem(
                501, "not_implemented",
                "The fake server does not serve \(request.method) \(request.path) (see SynclineTesting's documentation).")
        }
    }

    /// What every request meets before its route: the server down (503), or its token
    /// refused (401, saying why as the gateway does).
    func turnedAway(_ request: FakeRequest) -> FakeAnswer? {
        if unavailable {
            var answer = FakeAnswer.problem(503, "unavailable", "The server is unavailable (the test made it so).")
            answer.headers["Retry-After"] = "1"
            return answer
        }
        guard let token = request.token else { return nil }
        if signedOut.contains(token.user) {
            return .problem(401, "unauthorized", "The token is not valid (the test signed the user out).", members: ["token": "invalid"])
        }
        if token.generation < validFrom[token.user] ?? 0 {
            return .problem(401, "unauthorized", "The token has expired (the test made it so).", members: ["token": "expired"])
        }
        return nil
    }

    /// The route a path takes, with the id it names in place of `:id` (a job, space, file,
    /// upload or invitation code).
    static func route(_ segments: [String]) -> (route: String, named: String) {
        if segments.count == 4, segments[1] == "sync", segments[2] == "jobs" { return ("/v1/sync/jobs/:id", segments[3]) }
        if segments.count >= 3, ["spaces", "blobs", "uploads", "invitations", "devices"].contains(segments[1]) {
            return ((["", segments[0], segments[1], ":id"] + segments.dropFirst(3)).joined(separator: "/"), segments[2])
        }
        return ("/" + segments.joined(separator: "/"), "")
    }

    mutating func push(_ request: FakeRequest, user: String, deliveries: inout [Delivery]) -> FakeAnswer {
        let push: PushRequest
        do {
            push = try PushValidation.parse(request.body)
        } catch {
            switch error {
            case .notJSON(let detail): return .problem(400, "invalid_request", detail)
            case .invalid(let detail, let pointer, let limit):
                return .problem(422, "invalid_request", detail, members: Self.members(pointer: pointer, limit: limit))
            case .op(let index, let pointer, let detail, let limit):
                var members = Self.members(pointer: pointer, limit: limit)
                members["op_index"] = .int(Int64(index))
                return .problem(422, "invalid_request", detail, members: members)
            }
        }
        let device = Names.canonicalUUID(push.deviceID) ?? push.deviceID
        guard devices[device] == user else { return .problem(404, "not_found", "No such device.") }
        guard let spaceID = space(push.spaceID?.description, of: user) else { return .problem(404, "not_found", "No such space.") }
        guard spaces[spaceID]?.members[user]?.canWrite == true else {
            return .problem(403, "forbidden", "A viewer of this space cannot push to it.")
        }
        let key = request.headers["idempotency-key"].map { "\(spaceID) \($0)" }
        if let key, let earlier = idempotencyKeys[key] {
            guard earlier.body == request.body, let job = jobs[earlier.job] else {
                return .problem(422, "invalid_request", "This Idempotency-Key was used with a different body.")
            }
            return .json(202, PushAccepted(jobID: job.id, status: job.status, ops: job.ops.count))
        }
        var ops = push.ops
        for index in ops.indices {
            switch refusal?(ops[index]) {
            case .invalid(let detail)?:
                return .problem(
                    422, "invalid_request", detail, members: ["op_index": .int(Int64(index)), "pointer": .string("/ops/\(index)")])
            case .rejected(let reason)?:
                ops[index].rejected = reason
            case nil:
                break
            }
        }
        let held = spaces[spaceID]?.blobs ?? [:]
        for (index, op) in ops.enumerated() {
            if let missing = JSONValue.object(op.data ?? [:]).blobReferences.first(where: { held[$0.sha256] == nil }) {
                return .problem(
                    409, "blob_missing",
                    "The op references the file \(missing.sha256), which the space does not hold: upload it first.",
                    members: ["op_index": .int(Int64(index)), "pointer": .string("/ops/\(index)/data"), "sha256": .string(missing.sha256)])
            }
        }
        let job = submit(ops, user: user, device: device, space: spaceID, &deliveries)
        if let key { idempotencyKeys[key] = (job.id, request.body) }
        return .json(202, PushAccepted(jobID: job.id, status: job.status, ops: ops.count))
    }

    /// Queues a job of `ops`, stamped by the user's clock, and applies the queue unless jobs
    /// are paused. Returns the job as it stands after that.
    mutating func submit(_ ops: [Op], user: String, device: String, space: String, _ deliveries: inout [Delivery]) -> Job {
        var clock = clocks[user] ?? HLCState(milliseconds: 0, counter: 0)
        let stamped = clock.stamp(
            ops, now: Int64(Date().timeIntervalSince1970 * 1000), deviceID: device, maxSkew: maxClockSkewMilliseconds)
        clocks[user] = clock
        let job = Job(id: UUID.timeOrdered().uuidString.lowercased(), user: user, device: device, space: space, ops: stamped)
        jobs[job.id] = job
        queued.append(job.id)
        if !jobsPaused { runJobs(&deliveries) }
        return jobs[job.id] ?? job
    }

    static func members(pointer: String?, limit: Int?) -> [String: JSONValue] {
        var members: [String: JSONValue] = [:]
        if let pointer { members["pointer"] = .string(pointer) }
        if let limit { members["limit"] = .int(Int64(limit)) }
        return members
    }

    /// Applies the queued jobs in order, as the worker would, and tells the streams.
    mutating func runJobs(_ deliveries: inout [Delivery]) {
        for id in queued {
            guard var job = jobs[id], var space = spaces[job.space] else { continue }
            if let reason = deadLetter?(job.ops) {
                job.status = .dead
                job.lastError = reason
                job.finishedAt = Timestamp.format(Date())
                jobs[id] = job
                let device = job.device
                deliveries.append(Delivery(
                    to: { $0.device == device },
                    message: StreamMessage(json: .object([
                        "type": "job", "job_id": .string(id), "status": .string(JobStatus.dead.rawValue), "troubled": true,
                    ]))))
                continue
            }
            let outcome = JobApplier.apply(
                ops: job.ops, records: space.records, knownOpIDs: space.knownOpIDs, counter: space.counter, deviceID: job.device)
            for (key, record) in outcome.changed { space.records[key] = record }
            space.knownOpIDs.formUnion(outcome.remembered)
            let moved = outcome.counter != space.counter
            space.counter = outcome.counter
            spaces[space.id] = space
            job.status = .succeeded
            job.results = outcome.results
            job.checkpoint = space.counter
            job.finishedAt = Timestamp.format(Date())
            jobs[id] = job
            let troubled = outcome.results.contains { $0.status == .conflict || $0.status == .rejected }
            let (device, spaceID, members) = (job.device, space.id, Set(space.members.keys))
            deliveries.append(Delivery(
                to: { $0.device == device },
                message: StreamMessage(json: .object([
                    "type": "job", "job_id": .string(id), "status": .string(JobStatus.succeeded.rawValue),
                    "checkpoint": .string(String(space.counter)), "troubled": .bool(troubled),
                ]))))
            if moved {
                deliveries.append(Delivery(
                    to: { members.contains($0.user) && ($0.space == nil || $0.space == spaceID) },
                    message: StreamMessage(json: .object([
                        "type": "poke", "cursor": .string(String(space.counter)), "space_id": .string(spaceID),
                    ]))))
            }
        }
        queued.removeAll()
    }

    /// Why the gateway would refuse a device's registration, if it would: a name and a
    /// platform of plain text (1 to 200 and 1 to 50 characters), a `push_url` that is an
    /// http(s) URL.
    static func refusedRegistration(_ body: Data) -> FakeAnswer? {
        guard let root = try? JSONParser.parse(body) else { return .notJSON }
        guard let fields = root.objectValue else { return .problem(422, "invalid_request", "The body must be a JSON object.") }
        guard let name = fields["name"]?.stringValue, (1...200).contains(name.unicodeScalars.count), Names.isPlainText(name) else {
            return .problem(422, "invalid_request", "name must be a string of 1 to 200 characters, without control characters.")
        }
        guard let platform = fields["platform"]?.stringValue, (1...50).contains(platform.unicodeScalars.count), Names.isPlainText(platform) else {
            return .problem(422, "invalid_request", "platform must be a string of 1 to 50 characters, without control characters.")
        }
        if let url = fields["push_url"], !url.isNull {
            guard let text = url.stringValue, let scheme = URLComponents(string: text)?.scheme, ["http", "https"].contains(scheme) else {
                return .problem(422, "invalid_request", "push_url must be an http(s) URL.")
            }
        }
        return nil
    }

    /// A pull: its parameters checked first, then the space, as the gateway does.
    mutating func pull(_ request: FakeRequest, user: String) -> FakeAnswer {
        guard let since = Int64(request.query["since"] ?? "0"), since >= 0 else {
            return .problem(400, "invalid_request", "since must be a cursor from an earlier pull.")
        }
        if let minCursor = request.query["min_cursor"], (Int64(minCursor) ?? -1) < 0 {
            return .problem(400, "invalid_request", "min_cursor must be a cursor from a job's checkpoint or a poke.")
        }
        guard let limit = request.query["limit"].map({ Int($0) }) ?? 500, (1...10_000).contains(limit) else {
            return .problem(400, "invalid_request", "limit must be an integer from 1 to 10000.")
        }
        let collections = request.query["collections"].map { $0.split(separator: ",", omittingEmptySubsequences: false).map(String.init) }
        if let collections, !collections.allSatisfy(Names.isValidCollection) {
            return .problem(400, "invalid_request", "collections must be a comma-separated list of collection names.")
        }
        if let named = request.query["space_id"], SpaceID(named) == nil {
            return .problem(400, "invalid_request", "space_id must be a space's id.")
        }
        if let named = request.query["device_id"], DeviceID(named) == nil {
            return .problem(400, "invalid_request", "device_id must be a device's id.")
        }
        guard let form = PullForm(rawValue: request.query["form"] ?? PullForm.full.rawValue) else {
            return .problem(400, "invalid_request", "form must be full or compact.")
        }
        guard let spaceID = space(request.query["space_id"], of: user), let space = spaces[spaceID] else {
            return .problem(404, "not_found", "No such space.")
        }
        let changed = space.records.filter { $0.value.version > since && collections?.contains($0.key.collection) != false }
            .map(\.value).sorted { $0.version < $1.version }
        let records = changed.prefix(limit)
        let hasMore = changed.count > limit
        let cursor = hasMore ? records.last!.version : max(since, space.counter)
        let page = PullPage(changes: records.map(\.view), cursor: String(cursor), hasMore: hasMore)
        return .json(200, page.json(form))
    }

    mutating func putBlob(_ request: FakeRequest, sha256: String, user: String) -> FakeAnswer {
        guard BlobReference.isValidSHA256(sha256) else {
            return .problem(400, "invalid_request", "The file's name must be its SHA-256, in lowercase hex.")
        }
        guard let spaceID = space(request.query["space_id"], of: user) else { return .problem(404, "not_found", "No such space.") }
        guard Hex.string(SHA256.hash(data: request.body)) == sha256 else {
            return .problem(422, "hash_mismatch", "The bytes do not hash to \(sha256).")
        }
        spaces[spaceID]?.blobs[sha256] = request.body
        return FakeAnswer(status: 201)
    }

    /// The space and everything in it go, its jobs too; its members' streams narrowed to it end.
    mutating func deleteSpace(_ id: String, _ deliveries: inout [Delivery]) {
        spaces[id] = nil
        jobs = jobs.filter { $0.value.space != id }
        queued.removeAll { jobs[$0] == nil }
        idempotencyKeys = idempotencyKeys.filter { !$0.key.hasPrefix(id + " ") }
        deliveries.append(Delivery(to: { $0.space == id }, message: nil))
    }

    enum StreamOpening {
        /// The stream, and its first message.
        case opened(Stream, StreamMessage)
        case refused(FakeAnswer)
    }

    /// Opens a stream, or says why it cannot open.
    mutating func openStream(_ request: FakeRequest) -> StreamOpening {
        if let refused = turnedAway(request) { return .refused(refused) }
        guard let user = request.user else { return .refused(.problem(401, "unauthorized", "A bearer token is required.")) }
        guard let device = request.query["device_id"].map({ Names.canonicalUUID($0) ?? $0 }), devices[device] == user else {
            return .refused(.problem(404, "not_found", "No such device."))
        }
        let narrowed = request.query["space_id"]
        guard let spaceID = space(narrowed, of: user), let space = spaces[spaceID] else {
            return .refused(.problem(404, "not_found", "No such space."))
        }
        let stream = Stream(user: user, device: device, space: narrowed == nil ? nil : spaceID)
        let hello = StreamMessage(json: .object([
            "type": "hello", "cursor": .string(String(space.counter)), "space_id": .string(spaceID), "spaces": .object([:]),
        ]))
        return .opened(stream, hello)
    }
}

/// How the fake server refuses an op (see `FakeSyncServer.refuse(_:)`).
public enum Refusal: Sendable, Equatable {
    /// The push is refused with a 422 naming the op, as the gateway refuses an invalid
    /// op: the client sets it aside.
    case invalid(String)
    /// The job applies, but refuses this op with the reason code: the client reports
    /// `SyncEvent.rejected` and drops the op.
    case rejected(String)
}
