import AsyncHTTPClient
import Auth
import Crypto
import Foundation
import Logging
import Metrics
import NIOCore
import Persistence
import ServiceSupport
import SyncModels

/// Asks the app's backend about a job's calls: one signed `POST` per hook with all of the
/// job's calls to it, within the hook's deadline. A 2xx answers each call (ops or a
/// refusal), a 4xx refuses them all; anything else — no answer in time, a 5xx, a redirect,
/// an address that may not be reached, an answer that leaves a call out — is a
/// `HookFailure`, and the job is tried again by its retry tiers, then dead-lettered.
struct HookCaller: Sendable {
    let client: HTTPClient
    let allowPrivate: Bool
    let logger: Logger

    /// A hook's answers are small: what a call's ops may hold, and some.
    static let maxAnswerBytes = 4 << 20

    /// The client hooks are posted with: a redirect is never followed (it could lead to a
    /// private address after that address was checked).
    static func makeClient() -> HTTPClient {
        var configuration = HTTPClient.Configuration(redirectConfiguration: .disallow, timeout: .init(connect: .seconds(10)))
        configuration.connectionPool = .init(idleTimeout: .seconds(60))
        return HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    }

    /// Every call's verdict, its ops given their ids (derived from the call's) and the
    /// call's clock. A pusher no longer a member asks nothing: their ops are refused anyway.
    func verdicts(for work: ApplyStore.HookWork, rules: Rules) async throws -> [String: HookExchange.Verdict] {
        guard let role = work.role else { return [:] }
        var byHook: [(hook: Rules.Hook, calls: [ApplyStore.HookWork.Call])] = []
        for call in work.calls {
            guard let hook = rules.collections[call.op.collection]?.hook else { continue }  // refused by the rules at apply
            if let index = byHook.firstIndex(where: { $0.hook == hook }) { byHook[index].calls.append(call) } else { byHook.append((hook, [call])) }
        }
        var verdicts: [String: HookExchange.Verdict] = [:]
        for (hook, calls) in byHook {
            let body = HookExchange.request(
                job: work.jobID, space: work.space, user: work.user, role: role, calls: calls.map { ($0.op, $0.record) })
            let answered = try await ask(hook, body: body, calls: calls.map(\.op.opID), space: work.space)
            for call in calls {
                verdicts[call.op.opID] = Self.identified(answered[call.op.opID] ?? .reject("unanswered"), call: call.op)
            }
        }
        return verdicts
    }

    private func ask(_ hook: Rules.Hook, body: [UInt8], calls: [String], space: SpaceID) async throws -> [String: HookExchange.Verdict] {
        let started = ContinuousClock.now
        do {
            let verdicts = try await post(hook, body: body, calls: calls, space: space)
            Counter(label: "syncline_hook_requests_total", dimensions: [("outcome", "answered")]).increment()
            Timer(label: "syncline_hook_seconds").record(duration: ContinuousClock.now - started)
            return verdicts
        } catch {
            Counter(label: "syncline_hook_requests_total", dimensions: [("outcome", "failed")]).increment()
            logger.warning("hook failed", metadata: ["hook.url": "\(hook.url)", "error": "\(error)"])
            throw error
        }
    }

    private func post(_ hook: Rules.Hook, body: [UInt8], calls: [String], space: SpaceID) async throws -> [String: HookExchange.Verdict] {
        guard let host = URLComponents(string: hook.url)?.host else { throw HookFailure(description: "the hook's URL has no host") }
        if !allowPrivate, await WebhookAddresses.resolvesToPrivateOffThePool(host: host) {
            throw HookFailure(description: "the hook's host \(host) is a private address (ALLOW_PRIVATE_WEBHOOKS is off)")
        }
        let (status, answer): (Int, ByteBuffer)
        do {
            (status, answer) = try await withDeadline(seconds: hook.timeout) { [client] in
                let request = HTTPClientRequest.signedPost(to: hook.url, body: body, secret: hook.secret)
                let response = try await client.execute(request, timeout: .milliseconds(Int64(hook.timeout * 1000)))
                return (Int(response.status.code), try await response.body.collect(upTo: Self.maxAnswerBytes))
            }
        } catch let error as DeadlineExceeded {
            throw HookFailure(description: "the hook did not answer within \(error.seconds) s")
        } catch {
            throw HookFailure(description: "the hook could not be reached: \(error)")
        }
        let bytes = Array(answer.readableBytesView)
        switch status {
        case 200..<300:
            do {
                return try HookExchange.verdicts(bytes, calls: calls, space: space)
            } catch {
                throw HookFailure(description: error.description)
            }
        case 400..<500:
            let refusal = HookExchange.refusal(status: status, body: bytes)
            return Dictionary(uniqueKeysWithValues: calls.map { ($0, refusal) })
        default:
            throw HookFailure(description: "the hook answered HTTP \(status)")
        }
    }

    /// The ops of a call's verdict, each with the call's clock and an id derived from the
    /// call's and its place: the same on every attempt, so each applies once.
    static func identified(_ verdict: HookExchange.Verdict, call: Op) -> HookExchange.Verdict {
        guard case .ops(var ops) = verdict else { return verdict }
        for index in ops.indices {
            ops[index].opID = derivedOpID(call: call.opID, index: index)
            ops[index].hlc = call.hlc
        }
        return .ops(ops)
    }

    /// A UUID (version 8, RFC 9562) from the SHA-256 of the call's id and the op's place.
    static func derivedOpID(call: String, index: Int) -> String {
        var bytes = Array(SHA256.hash(data: Array("syncline.call:\(call):\(index)".utf8)).prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x80
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        let hex = bytes.map { String(format: "%02x", $0) }.joined()
        let parts = [hex.prefix(8), hex.dropFirst(8).prefix(4), hex.dropFirst(12).prefix(4), hex.dropFirst(16).prefix(4), hex.dropFirst(20)]
        return parts.joined(separator: "-")
    }
}

/// A hook that could not answer: no answer in time, a 5xx, an address refused, an answer
/// that cannot be used. The job's attempt fails and is retried by its tiers.
struct HookFailure: Error, CustomStringConvertible {
    let description: String
}
