/// What a server mutator's hook is sent and answers. The worker posts one request per job
/// (and hook) with all of its calls:
/// `{job_id, space_id, user_id, role, calls: [{op_id, name, args, record}]}`; the hook
/// answers `{"calls": [{"op_id", "ops": [...]}, {"op_id", "reject": "reason"}]}`, where
/// `ops` are ordinary upsert, patch, delete, increment, add and remove ops on the same space (no op_id: each gets
/// one derived from the call's, so that a retried job applies them once).
public enum HookExchange {
    /// What one call came to.
    public enum Verdict: Sendable, Equatable {
        /// Ops to apply in the job's transaction at the call's clock (op ids not yet given).
        case ops([Op])
        /// The backend refused the call: its result is `rejected` with `hook:<reason>`.
        case reject(String)
    }

    /// A hook's answer that cannot be used: the attempt fails and the job is tried again.
    public struct UnusableAnswer: Error, Equatable, CustomStringConvertible {
        public let description: String
    }

    /// The most ops one call may answer with.
    public static let maxOpsPerCall = Limits.maxOpsPerPush

    /// The request's body.
    public static func request(
        job: JobID, space: SpaceID, user: UserID, role: SpaceRole, calls: [(op: Op, record: RecordView?)]
    ) -> [UInt8] {
        let items: [JSONValue] = calls.map { call in
            var fields: [String: JSONValue] = [
                "op_id": .string(call.op.opID), "name": .string(call.op.name ?? ""), "args": call.op.args ?? .null,
                "collection": .string(call.op.collection), "id": .string(call.op.id),
            ]
            fields["record"] = call.record.map { record in
                .object([
                    "version": .int(record.version), "deleted": .bool(record.deleted),
                    "data": record.data.map(JSONValue.object) ?? .null,
                ])
            } ?? .null
            return .object(fields)
        }
        return JSONWriter.bytes(.object([
            "job_id": .string(job.description), "space_id": .string(space.description), "user_id": .string(user.text), "role": .string(role.rawValue),
            "calls": .array(items),
        ]))
    }

    /// Reads a 2xx answer: a verdict for every call asked. Ops that are no upsert, patch,
    /// delete, increment, add or remove, that are malformed, or that name another space refuse their call
    /// (`invalid_op`, `other_space`); a call the answer leaves out makes it unusable.
    public static func verdicts(_ body: [UInt8], calls: [String], space: SpaceID) throws(UnusableAnswer) -> [String: Verdict] {
        guard let root = try? JSONParser.parse(body), let items = root.objectValue?["calls"]?.arrayValue else {
            throw UnusableAnswer(description: "the hook's answer is not {\"calls\": [...]}")
        }
        var verdicts: [String: Verdict] = [:]
        for item in items {
            guard let fields = item.objectValue, let opID = fields["op_id"]?.stringValue.flatMap(Names.canonicalUUID),
                  calls.contains(opID)
            else { continue }
            if let reason = fields["reject"] {
                verdicts[opID] = .reject(reasonToken(reason.stringValue))
            } else if let ops = fields["ops"]?.arrayValue {
                verdicts[opID] = verdict(ops, space: space)
            } else {
                throw UnusableAnswer(description: "the answer to call \(opID) has neither ops nor reject")
            }
        }
        if let missing = calls.first(where: { verdicts[$0] == nil }) {
            throw UnusableAnswer(description: "the hook's answer leaves out call \(missing)")
        }
        return verdicts
    }

    /// The verdict of a hook's 4xx: every call refused, with the reason its body gives
    /// (`{"reject": "reason"}`) or the status.
    public static func refusal(status: Int, body: [UInt8]) -> Verdict {
        let given = (try? JSONParser.parse(body))?.objectValue?["reject"]?.stringValue
        return .reject(given.map { reasonToken($0) } ?? "http_\(status)")
    }

    static func verdict(_ raw: [JSONValue], space: SpaceID) -> Verdict {
        guard raw.count <= maxOpsPerCall else { return .reject("too_many_ops") }
        var ops: [Op] = []
        for item in raw {
            guard var fields = item.objectValue else { return .reject("invalid_op") }
            if let named = fields.removeValue(forKey: "space_id"), !named.isNull {
                guard named.stringValue.flatMap(SpaceID.init) == space else { return .reject("other_space") }
            }
            // A placeholder id: the worker gives each op its own, derived from the call's.
            fields["op_id"] = .string("00000000-0000-0000-0000-000000000000")
            fields["hlc"] = nil
            fields["if_version"] = nil
            guard let op = try? PushValidation.parseOp(.object(fields)), [.upsert, .patch, .delete, .increment, .add, .remove].contains(op.type) else {
                return .reject("invalid_op")
            }
            ops.append(op)
        }
        return .ops(ops)
    }

    /// A reason as results carry it: short visible ASCII, or `rejected`.
    static func reasonToken(_ text: String?) -> String {
        guard let text, (1...64).contains(text.utf8.count), text.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) else { return "rejected" }
        return text
    }
}
