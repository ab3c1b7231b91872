import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import SyncModels
import URLSessionCancellation

/// The gateway's HTTP API as the client uses it. A 401 asks the token provider once for a
/// fresh token and repeats the request.
struct ServerAPI: Sendable {
    let base: URL
    let session: URLSession
    let tokenProvider: @Sendable (_ refresh: Bool) async throws -> String

    struct Answer: Sendable {
        let status: Int
        let headers: [String: String]
        let body: Data

        var json: JSONValue? { try? JSONParser.parse(body) }
        /// A problem's `detail`, else the body as text: for people, never parsed.
        var detail: String { json?.objectValue?["detail"]?.stringValue ?? String(decoding: body.prefix(500), as: UTF8.self) }
        /// What the device does with this answer to a push of `batchOps` ops (`namesSpace`:
        /// pushed to a shared space).
        func pushAnswer(namesSpace: Bool, batchOps: Int) -> PushAnswer {
            PushAnswer(status: status, body: json, detail: detail, retryAfter: retryAfter, namesSpace: namesSpace, batchOps: batchOps)
        }
        /// Seconds from `Retry-After` (delta-seconds form).
        var retryAfter: Double? { header("Retry-After").flatMap(Double.init) }

        /// A header field's value, whatever the case of its name.
        func header(_ name: String) -> String? { headers.first { $0.key.lowercased() == name.lowercased() }?.value }
    }

    /// The app's token provider threw: there is no user to sync for until it gives one.
    struct TokenUnavailable: Error, CustomStringConvertible {
        let cause: any Error
        var description: String { "no token: \(cause)" }
    }

    func send(_ method: String, _ path: String, body: Data? = nil, headers: [String: String] = [:]) async throws -> Answer {
        var answer = try await sendOnce(method, path, body: body, headers: headers, token: try await token(refresh: false))
        if answer.status == 401 {
            answer = try await sendOnce(method, path, body: body, headers: headers, token: try await token(refresh: true))
        }
        return answer
    }

    private func token(refresh: Bool) async throws -> String {
        do {
            return try await tokenProvider(refresh)
        } catch let error as CancellationError {
            throw error
        } catch {
            throw TokenUnavailable(cause: error)
        }
    }

    private func sendOnce(_ method: String, _ path: String, body: Data?, headers: [String: String], token: String) async throws -> Answer {
        var request = URLRequest(url: URL(string: path, relativeTo: base)!)
        request.httpMethod = method
        request.httpBody = body
        request.timeoutInterval = 30
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        if body != nil { request.setValue("application/json", forHTTPHeaderField: "Content-Type") }
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let session = self.session, prepared = request
        let (data, response) = try await AbandonOnCancel.run { try await session.data(for: prepared) }
        guard let http = response as? HTTPURLResponse else { throw URLError(.badServerResponse) }
        var fields: [String: String] = [:]
        for (key, value) in http.allHeaderFields { fields["\(key)"] = "\(value)" }
        return Answer(status: http.statusCode, headers: fields, body: data)
    }

    func registerDevice(name: String, platform: String) async throws -> String {
        let body = JSONWriter.bytes(.object(["name": .string(name), "platform": .string(platform)]))
        let answer = try await send("POST", "/v1/devices", body: Data(body))
        guard answer.status == 201, let id = answer.json?.objectValue?["device_id"]?.stringValue else {
            throw ClientError.server(status: answer.status, detail: answer.detail)
        }
        return id
    }

    /// One page of changes of `space` (nil: the personal one) after `since`, from a server
    /// that has reached at least `minCursor` (a replica behind it leaves the answer to the
    /// primary). Naming the device lets support see how far it pulled.
    func pull(space: String?, device: String?, since: String?, minCursor: Int64, limit: Int) async throws -> Answer {
        var path = "/v1/sync/pull?form=compact&limit=\(limit)"
        if let space { path += "&space_id=\(space)" }
        if let device { path += "&device_id=\(device)" }
        if let since { path += "&since=\(since)" }
        if minCursor > 0 { path += "&min_cursor=\(minCursor)" }
        return try await send("GET", path)
    }

    /// Tells the server which ops this device set aside (for support). True once the server
    /// has them, or refused them for good (a 4xx but 401, 408 and 429: sending them again
    /// would not help).
    func reportSetAside(device: String, space: String?, ops: [LocalStore.UnreportedSetAside]) async throws -> Bool {
        let body: JSONValue = .object(["ops": .array(ops.map { op in
            // The reason as plain text of at most 100 characters, as the server takes it.
            let scalars = op.reason.unicodeScalars.prefix(100).map { Names.isPlainText(String($0)) ? $0 : " " }
            var fields: [String: JSONValue] = [
                "op_id": .string(op.opID), "reason": .string(String(String.UnicodeScalarView(scalars))),
                "collection": .string(op.collection), "id": .string(op.recordID),
            ]
            if let space { fields["space_id"] = .string(space) }
            if let job = op.jobID { fields["job_id"] = .string(job) }
            return .object(fields)
        })])
        let answer = try await send("POST", "/v1/devices/\(device)/set-aside", body: Data(JSONWriter.bytes(body)))
        return answer.status == 204 || ((400...499).contains(answer.status) && ![401, 408, 429].contains(answer.status))
    }

    /// A JSON answer of status `expected`, decoded; any other status is the server's error.
    func decode<T: Decodable>(_ type: T.Type, _ method: String, _ path: String, body: JSONValue? = nil, expected: Int) async throws -> T {
        let answer = try await send(method, path, body: body.map { Data(JSONWriter.bytes($0)) })
        guard answer.status == expected else { throw ClientError.server(status: answer.status, detail: answer.detail) }
        return try JSONCoding.decode(T.self, from: answer.body)
    }

    /// A request that answers 204 on success.
    func perform(_ method: String, _ path: String) async throws {
        let answer = try await send(method, path)
        guard answer.status == 204 else { throw ClientError.server(status: answer.status, detail: answer.detail) }
    }

    /// A pulled page, in either form (`PullPage`).
    static func page(_ answer: Answer) throws -> PullPage {
        guard let json = answer.json, let page = PullPage(json: json) else {
            throw ClientError.server(status: answer.status, detail: "unreadable pull page")
        }
        return page
    }
}

/// Why a client call failed.
public enum ClientError: Error, Sendable, Equatable, CustomStringConvertible {
    case server(status: Int, detail: String)
    case stopped
    /// The space is gone (deleted, or this user left or was removed); its local data went
    /// with it. Make a client for another space.
    case spaceGone
    /// The local store at this path belongs to another space (`held`; "personal" for the
    /// personal space).
    case otherSpace(held: String)
    /// The write was refused on the device, before anything was stored or sent: the
    /// server would refuse it (a bad collection or id, oversized data, NaN or infinity…).
    /// `detail` names the field.
    case invalidOp(detail: String)
    /// The write was refused on the device because the app's rules refuse it for this
    /// device's role in its space: `rule` names the rule (`recipes.schema`), `detail` what
    /// is wrong. Nothing was stored or sent.
    case refusedByRule(rule: String, detail: String)
    /// `retry` or `drop` named an op that is not set aside (unknown, or already resolved).
    case notSetAside(opID: String)
    /// `sync()` did not finish: the server could not be reached, refused for now (429,
    /// 5xx), or its jobs were still running at the timeout. Nothing is lost; try later
    /// (not before `retryAfter` seconds when the server said so).
    case syncFailed(reason: String, retryAfter: Double?)
    /// A query names a field no JSON path can reach, or compares with null (use `isNull`).
    case invalidQuery(detail: String)
    /// A typed record could not be made from a record's data (`detail` names the field).
    case undecodable(collection: String, id: String, detail: String)
    /// The client signed out and wiped the device's data (`signOut(wipe: true)`): make a
    /// new client after the next sign-in.
    case signedOut

    public var description: String {
        switch self {
        case .invalidOp(let detail): return "refused on the device: \(detail)"
        case .refusedByRule(let rule, let detail): return "refused on the device by the rule \(rule): \(detail)"
        case .notSetAside(let opID): return "no op \(opID) is set aside"
        case .invalidQuery(let detail): return "invalid query: \(detail)"
        case .undecodable(let collection, let id, let detail): return "\(collection)/\(id) does not decode: \(detail)"
        case .syncFailed(let reason, _): return "sync did not finish: \(reason)"
        case .server(let status, let detail): return "server answered \(status): \(detail)"
        case .stopped: return "the client is stopped"
        case .signedOut: return "this client signed out and its data was wiped: make a new client after the next sign-in"
        case .spaceGone: return "the space is gone: deleted, or you are no longer a member"
        case .otherSpace(let held): return "this local store belongs to space \(held)"
        }
    }
}
