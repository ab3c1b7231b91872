/// What a device does with the gateway's answer to a push: the one decision both clients
/// keep (the web client's `pushAnswer` is its twin), held against the gateway's own answers
/// by the conformance vectors (`push_answers`).
public enum PushAnswer: Equatable, Sendable {
    /// Taken: the job to follow.
    case accepted(jobID: String)
    /// Refused: the op at `opIndex` (nil: every op of the batch) is set aside with `reason`,
    /// never sent again. A refusal by the app's rules gives `rule:<name>` as the reason and
    /// names the rules' version, which the device then looks up.
    case setAside(opIndex: Int?, reason: String, rulesVersion: Int64?)
    /// The space lacks a file an op references: sent again once this device holds the file
    /// (the batch is dissolved and the file uploaded), else that op is set aside.
    case fileMissing(sha256: String?, opIndex: Int?, detail: String)
    /// The server knows no such device (its database may be older than the device) or
    /// space: a pull tells whether the space is gone, and the device registers anew.
    case unknownDeviceOrSpace(detail: String)
    /// The batch is larger than the server takes: the next ones are half the size.
    case halveBatch
    /// Not taken now (busy, limited, down, or an answer this client does not know): the pass
    /// fails and is tried again after `retryAfter` seconds, or the backoff.
    case retry(status: Int, detail: String, retryAfter: Double?)

    /// - Parameters:
    ///   - body: the answer's JSON (a problem's members, or the accepted job).
    ///   - detail: the problem's `detail`, else the body's text (for people, never parsed).
    ///   - retryAfter: seconds from `Retry-After`.
    ///   - namesSpace: whether the push named a shared space (a 403 there is a viewer's).
    ///   - batchOps: how many ops the batch holds.
    public init(status: Int, body: JSONValue?, detail: String, retryAfter: Double?, namesSpace: Bool, batchOps: Int) {
        let members = body?.objectValue ?? [:]
        let opIndex = members["op_index"]?.intValue.map { Int($0) }
        let rule = members["rule"]?.stringValue
        let refusedBecause = rule.map(Self.ruleReason) ?? detail
        let rulesVersion = rule == nil ? nil : members["rules_version"]?.intValue
        switch status {
        case 202:
            if let jobID = members["job_id"]?.stringValue {
                self = .accepted(jobID: jobID)
            } else {
                self = .retry(status: status, detail: "push answer without job_id", retryAfter: nil)
            }
        case 400, 422:
            self = .setAside(opIndex: opIndex, reason: refusedBecause, rulesVersion: rulesVersion)
        case 403 where namesSpace:
            // A viewer's edits: the server takes none of them while the role lasts.
            self = .setAside(opIndex: nil, reason: refusedBecause, rulesVersion: rulesVersion)
        case 409 where members["code"]?.stringValue == "blob_missing":
            self = .fileMissing(sha256: members["sha256"]?.stringValue, opIndex: opIndex, detail: detail)
        case 404:
            self = .unknownDeviceOrSpace(detail: detail)
        case 413 where batchOps > 1:
            self = .halveBatch
        case 413:
            self = .setAside(opIndex: 0, reason: detail, rulesVersion: nil)
        default:
            self = .retry(status: status, detail: detail, retryAfter: retryAfter)
        }
    }

    /// A set-aside reason naming the rule that refused an op: `rule:recipes.schema`.
    public static func ruleReason(_ rule: String) -> String { "rule:\(rule)" }
}

extension PushAnswer {
    /// The decision as the conformance vectors spell it.
    public var json: JSONValue {
        func optional(_ value: JSONValue?) -> JSONValue { value ?? .null }
        switch self {
        case .accepted(let jobID):
            return .object(["action": .string("accepted"), "job_id": .string(jobID)])
        case .setAside(let opIndex, let reason, let rulesVersion):
            return .object([
                "action": .string("set_aside"), "op_index": optional(opIndex.map { .int(Int64($0)) }),
                "reason": .string(reason), "rules_version": optional(rulesVersion.map(JSONValue.int)),
            ])
        case .fileMissing(let sha256, let opIndex, let detail):
            return .object([
                "action": .string("file_missing"), "sha256": optional(sha256.map(JSONValue.string)),
                "op_index": optional(opIndex.map { .int(Int64($0)) }), "detail": .string(detail),
            ])
        case .unknownDeviceOrSpace(let detail):
            return .object(["action": .string("unknown_device_or_space"), "detail": .string(detail)])
        case .halveBatch:
            return .object(["action": .string("halve_batch")])
        case .retry(let status, let detail, let retryAfter):
            return .object([
                "action": .string("retry"), "status": .int(Int64(status)), "detail": .string(detail),
                "retry_after": optional(retryAfter.map(JSONValue.double)),
            ])
        }
    }
}
