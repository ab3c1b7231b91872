import AMQPBridge
import BrokerTopology
import Foundation
import ServiceSupport
import SyncModels
import Testing
import TestSupport

/// The operator CLI against the same running stack.
@Suite("syncctl", .enabled(if: E2E.enabled), .serialized, .timeLimit(.minutes(3)))
struct SyncctlTests {
    /// Runs syncctl with the test environment and returns its exit code and standard output.
    func syncctl(_ arguments: String, env: String = "") throws -> (Int32, String) {
        Shell.output("\(env) \(E2E.binaries)/syncctl \(arguments) 2>/dev/null")
    }

    @Test func tokenMigrateAndJobsShow() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let (migrated, migrateOutput) = try syncctl("migrate")
            #expect(migrated == 0)
            #expect(migrateOutput.contains("up to date"))

            let user = "cli-\(UUID().uuidString.prefix(6))"
            let (minted, tokenOutput) = try syncctl("token --user \(user) --ttl 10m")
            #expect(minted == 0)
            let token = tokenOutput.trimmingCharacters(in: .whitespacesAndNewlines)
            let api = stack.client
            let device = try await api.registerDevice(token)
            let push = try await api.push(token, device: device, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": "cli", "data": ["t": 1]],
            ])
            let job = try #require(push.json["job_id"] as? String)
            _ = try await api.awaitJob(token, job)

            let (shown, showOutput) = try syncctl("jobs show \(job)")
            #expect(shown == 0)
            let json = try #require(try JSONSerialization.jsonObject(with: Data(showOutput.utf8)) as? [String: Any])
            #expect(json["user_id"] as? String == user)
            #expect((json["job"] as? [String: Any])?["status"] as? String == "succeeded")
            #expect(try syncctl("jobs show \(UUID())").0 != 0)

            // An admin token is also an ordinary user token.
            let (_, adminToken) = try syncctl("token --user ops --admin")
            #expect(try await api.request("GET", "/v1/devices", token: adminToken.trimmingCharacters(in: .whitespacesAndNewlines)).status == 200)
        }
    }

    @Test func deadLetterCommandsAndQueues() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let publisher = AMQPPublisher(
                endpoint: try #require(AMQPEndpoint(url: E2E.amqpURL!)), topology: E2E.topology, logger: E2E.logger)
            let unknown = UUID().uuidString.lowercased()
            try await publisher.publish([SynclineTopology.jobMessage(JobRef(space: .random(), job: JobID(unknown)!), traceID: nil)])
            let admin = await E2E.token("cli-admin", admin: true)
            _ = try await eventually(within: 10, "the unknown job dead-lettered") {
                try await stack.client.request("GET", "/v1/admin/dead-letters/\(unknown)", token: admin).status == 200 ? true : nil
            }
            let env = "RETRY_DELAYS=\(E2E.serviceDefaults["RETRY_DELAYS"]!) USER=tester"

            let (listed, listOutput) = try syncctl("dlq list --reason unknown_job --limit 500 --json", env: env)
            #expect(listed == 0)
            let page = try #require(try JSONSerialization.jsonObject(with: Data(listOutput.utf8)) as? [String: Any])
            #expect((page["items"] as? [[String: Any]] ?? []).contains { $0["job_id"] as? String == unknown })
            let (_, table) = try syncctl("dlq list --reason unknown_job --limit 500", env: env)
            #expect(table.contains(unknown) && table.contains("unknown_job"))

            let (shown, showOutput) = try syncctl("dlq show \(unknown)", env: env)
            #expect(shown == 0)
            #expect(showOutput.contains("\"reason\" : \"unknown_job\""))
            #expect(try syncctl("dlq replay \(unknown)", env: env).0 != 0, "a dead letter naming no job cannot be replayed")
            #expect(try syncctl("dlq replay --dry-run", env: env).0 != 0, "bulk replay needs a filter")
            let (dry, dryOutput) = try syncctl("dlq replay --reason unknown_job --dry-run", env: env)
            #expect(dry == 0 && dryOutput.contains("dry run"))

            let (queues, queuesOutput) = try syncctl("queues", env: env)
            #expect(queues == 0)
            let dlqLine = try #require(queuesOutput.split(separator: "\n").first { $0.hasPrefix("sync.jobs.dead-letters") })
            let depth = Int(dlqLine.split(separator: " ", omittingEmptySubsequences: true)[1]) ?? -1
            #expect(try syncctl("dlq discard \(unknown)", env: env).0 == 0)
            #expect(try syncctl("dlq show \(unknown)", env: env).0 != 0)
            let after = try await publisher.queueStats([SynclineTopology.deadLetterQueue]).first?.messages
            // Its message left the DLQ (a sweep may also drop stale copies of other dead letters).
            #expect((after ?? depth) <= depth - 1, "discarding took its message out of the DLQ")
            await publisher.shutdown()

            let audit = try await stack.client.request("GET", "/v1/admin/audit", token: admin).json["items"] as? [[String: Any]] ?? []
            #expect(audit.contains { $0["actor"] as? String == "syncctl:tester" && $0["action"] as? String == "discard" })
            #expect(audit.contains { $0["actor"] as? String == "syncctl:tester" && $0["action"] as? String == "bulk_replay_dry_run" })
        }
    }

    /// A broker set up by an earlier release holds its dead letters in classic queues
    /// (`sync.jobs.dlq`), which live on one node. The first action on dead letters moves
    /// them, intact, into the quorum queue that replaced it and deletes the old queue.
    @Test func aRetiredDeadLetterQueueIsMovedIntoItsReplacement() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let endpoint = try #require(AMQPEndpoint(url: E2E.amqpURL!))
            let publisher = AMQPPublisher(endpoint: endpoint, topology: E2E.topology, logger: E2E.logger)
            let admin = await E2E.token("cli-admin", admin: true)
            let (kept, discarded) = (UUID().uuidString.lowercased(), UUID().uuidString.lowercased())
            try await publisher.publish([kept, discarded].map { SynclineTopology.jobMessage(JobRef(space: .random(), job: JobID($0)!), traceID: nil) })
            for id in [kept, discarded] {
                _ = try await eventually(within: 10, "\(id) dead-lettered") {
                    try await stack.client.request("GET", "/v1/admin/dead-letters/\(id)", token: admin).status == 200 ? true : nil
                }
            }

            // Park both in a classic queue of the old name, as the earlier release did.
            let (retired, replacement) = SynclineTopology.retiredDeadLetterQueues[0]
            let old = AMQPPublisher(endpoint: endpoint, topology: AMQPTopology(
                exchanges: [.init(name: SynclineTopology.deadLetterExchange)], queues: [.init(name: retired)],
                bindings: [.init(queue: retired, exchange: SynclineTopology.deadLetterExchange,
                                 routingKey: SynclineTopology.deadLetterRoutingKey)]), logger: E2E.logger)
            let parked = Parked()
            _ = try await publisher.sweep(queue: replacement) { message in
                let ours = [kept, discarded].contains(SynclineTopology.deadLetterID(of: message))
                if ours { parked.append(message) }
                return ours
            }
            #expect(parked.messages.count == 2)
            try await old.publish(parked.messages.map {
                OutgoingMessage(exchange: "", routingKey: retired, body: $0.body, messageID: $0.messageID, headers: $0.headers)
            })
            await old.shutdown()
            #expect(try await publisher.queueStatsIfPresent(retired)?.messages == 2)

            let env = "RETRY_DELAYS=\(E2E.serviceDefaults["RETRY_DELAYS"]!) USER=tester"
            #expect(try syncctl("dlq discard \(discarded)", env: env).0 == 0)
            #expect(try await publisher.queueStatsIfPresent(retired) == nil, "the retired queue is gone")
            let found = Parked()
            _ = try await publisher.sweep(queue: replacement) { message in
                if [kept, discarded].contains(SynclineTopology.deadLetterID(of: message)) { found.append(message) }
                return false
            }
            #expect(found.messages.map(SynclineTopology.deadLetterID(of:)) == [kept], "the kept one moved; the discarded one left")
            #expect(found.messages.first?.header(SynclineTopology.Header.reason) == "unknown_job", "headers intact")
            await publisher.shutdown()
        }
    }
}

/// Messages a sweep's closure collects (it runs on the publisher's thread).
private final class Parked: @unchecked Sendable {
    private let lock = NSLock()
    private var collected: [AMQPDelivery] = []
    var messages: [AMQPDelivery] { lock.withLock { collected } }
    func append(_ message: AMQPDelivery) { lock.withLock { collected.append(message) } }
}
