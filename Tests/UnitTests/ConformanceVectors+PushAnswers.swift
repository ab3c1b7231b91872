import Foundation
@testable import Gateway
import HTTPSupport
import Persistence
import SyncModels
@testable import SynclineClient

/// The gateway's answers to pushes, made by its own builders (the intake's refusals as the
/// push route answers them, a push that fails validation, the rate limiter's 429, an
/// outage's 503, an accepted job), each with what a client does with it (`PushAnswer`).
extension ConformanceVectors {
    /// One answer and the batch it answered.
    struct PushAnswerCase {
        let name: String
        let status: Int
        let body: Data
        let retryAfter: Double?
        let namesSpace: Bool
        let batchOps: Int

        /// The answer as SynclineClient reads it (its `detail`: the problem's, else the body's text).
        var received: ServerAPI.Answer {
            ServerAPI.Answer(status: status, headers: retryAfter.map { ["Retry-After": String(Int($0))] } ?? [:], body: body)
        }

        /// What the client does with it.
        var decided: PushAnswer { received.pushAnswer(namesSpace: namesSpace, batchOps: batchOps) }
    }

    /// Keys in order: the file must come out the same every time.
    static let sortedEncoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }()

    static func answer(
        _ name: String, _ error: APIError, namesSpace: Bool = false, batchOps: Int = 3
    ) -> PushAnswerCase {
        PushAnswerCase(
            name: name, status: Int(error.status.code), body: Data(buffer: error.body),
            retryAfter: error.headers[.retryAfter].flatMap(Double.init), namesSpace: namesSpace, batchOps: batchOps)
    }

    static func refusal(_ name: String, _ outcome: JobStore.IntakeOutcome, namesSpace: Bool = false) -> PushAnswerCase {
        answer(name, SyncRoutes.problem(refusing: outcome, rulesVersion: 7)!, namesSpace: namesSpace)
    }

    /// A push body the gateway's validation refuses, as the route answers it.
    static func invalid(_ body: String) -> APIError {
        do {
            _ = try PushValidation.parse(Data(body.utf8))
            return APIError.badRequest("(the body was valid)")
        } catch {
            return APIError.from(error)
        }
    }

    static var pushAnswerCases: [PushAnswerCase] {
        let device = "6f1c2a4e-0b1d-4c3e-9f00-00000000000a"
        let badOp = #"{"device_id":"\#(device)","ops":[{"op_id":"6f1c2a4e-0b1d-4c3e-9f00-000000000001","type":"upsert","collection":"todos","id":"t1","data":{"a":1}},{"op_id":"nope","type":"upsert","collection":"todos","id":"t2","data":{}}]}"#
        let accepted = try! Self.sortedEncoder.encode(PushAccepted(jobID: "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", status: .queued, ops: 3))
        return [
            PushAnswerCase(name: "accepted", status: 202, body: accepted, retryAfter: nil, namesSpace: false, batchOps: 3),
            answer("an op the validation refuses", invalid(badOp)),
            answer("a body that is not JSON", invalid("{")),
            refusal("an op the app's rules refuse", .ruleRefused(op: 1, RuleRefusal(rule: "todos.schema", pointer: "/data/title", detail: "title must be a string"))),
            refusal("an Idempotency-Key used with another body", .keyReused),
            refusal("a file the space does not hold", .blobMissing(op: 2, sha256: String(repeating: "ab", count: 32))),
            refusal("no such device", .deviceNotFound),
            refusal("no such space", .spaceNotFound, namesSpace: true),
            refusal("a viewer pushing to a shared space", .spaceReadOnly, namesSpace: true),
            refusal("a revoked device, personal space", .deviceRevoked),
            answer("too large, several ops", APIError.tooLarge("The body is over 10 MiB.", limit: 10_485_760)),
            answer("too large, one op", APIError.tooLarge("The body is over 10 MiB.", limit: 10_485_760), batchOps: 1),
            answer("rate limited", APIError.rateLimited(retryAfter: 3, limit: 20)),
            answer("the database out", APIError.unavailable("The database cannot be reached.")),
        ]
    }

    static var pushAnswerVectors: JSONValue {
        .array(pushAnswerCases.map { answer in
            let body = answer.received.json ?? .null
            let detail = answer.received.detail
            let decided = answer.decided
            return [
                "name": .string(answer.name), "status": .int(Int64(answer.status)), "body": body, "detail": .string(detail),
                "retry_after": answer.retryAfter.map(JSONValue.double) ?? .null, "names_space": .bool(answer.namesSpace),
                "batch_ops": .int(Int64(answer.batchOps)), "expect": decided.json,
            ]
        })
    }
}
