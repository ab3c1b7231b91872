import AMQPBridge
import ArgumentParser
import BrokerTopology
import Foundation
import Logging
import Operations
import PQBridge
import Persistence
import ServiceSupport
import SyncModels

/// Runs `body` with the same dead-letter tools the gateway's admin API uses, straight
/// against PostgreSQL and RabbitMQ (DATABASE_URL, AMQP_URL, RETRY_DELAYS).
func withOffice<T: Sendable>(_ body: (DeadLetterOffice) async throws -> T) async throws -> T {
    try await withOperations { _, _, office, _ in try await body(office) }
}

/// Runs `body` with a pool, a publisher and the dead-letter office of this deployment.
func withOperations<T: Sendable>(
    _ body: (PGPool, AMQPPublisher, DeadLetterOffice, Logger) async throws -> T
) async throws -> T {
    let configuration = try Configuration.fromEnvironment()
    let publisher = AMQPPublisher(
        endpoint: try configuration.amqpEndpoint(),
        topology: SynclineTopology.topology(retryDelays: configuration.retryDelays), logger: Logger(label: "syncctl"))
    do {
        let value = try await withPool { pool, logger in
            try await body(
                pool, publisher,
                DeadLetterOffice(pool: pool, publisher: publisher, retryDelays: configuration.retryDelays, logger: logger), logger)
        }
        await publisher.shutdown()
        return value
    } catch {
        await publisher.shutdown()
        throw error
    }
}

/// Who an audit entry names for a syncctl action.
var syncctlActor: String { "syncctl:\(ProcessInfo.processInfo.environment["USER"] ?? "unknown")" }

func printJSON<T: Encodable>(_ value: T) throws {
    let encoder = JSONCoding.encoder()
    encoder.outputFormatting.insert(.prettyPrinted)
    print(String(decoding: try encoder.encode(value), as: UTF8.self))
}

struct DeadLetters: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dlq", abstract: "Inspect, replay and discard dead letters.",
        subcommands: [List.self, Show.self, Replay.self, Discard.self])

    struct Filter: ParsableArguments {
        @Option(help: "Only this user's dead letters.") var user: String?
        @Option(help: "Only the dead letters of jobs to this space (its id).") var space: String?
        @Option(help: "Only this reason (max_attempts, invalid_message, unknown_job, delivery_limit, …).") var reason: String?
        @Option(help: "Only those dead before this RFC 3339 time.") var deadBefore: String?

        var filter: DeadLetterFilter {
            DeadLetterFilter(
                userID: user, spaceID: space.flatMap(Names.canonicalUUID), reason: reason,
                deadBefore: deadBefore.flatMap(RFC3339.canonicalUTC))
        }

        func validate() throws {
            if let space, Names.canonicalUUID(space) == nil { throw ValidationError("--space must be a space's id") }
            if let deadBefore, RFC3339.canonicalUTC(deadBefore) == nil {
                throw ValidationError("--dead-before must be an RFC 3339 time such as 2026-11-22T10:00:00Z")
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List dead letters, newest first.")
        @OptionGroup var filter: Filter
        @Option(help: "How many.") var limit = 50
        @Option(help: "The queue: sync (jobs), notify (webhooks) or feed (record feeds).") var queue = "sync"
        @Flag(help: "Print JSON.") var json = false

        func validate() throws {
            guard ["sync", "notify", "feed"].contains(queue) else { throw ValidationError("--queue must be sync, notify or feed") }
        }

        func run() async throws {
            let page = try await withOffice { office in
                try await office.list(queue: queue, filter: filter.filter, limit: limit, cursor: nil)
            }
            if json { return try printJSON(page) }
            print("JOB_ID                                USER                 SPACE                                 REASON            ATTEMPTS  OPS  DEAD_AT                   LAST_ERROR")
            for item in page.items {
                let columns = [
                    item.jobID.padding(toLength: 38, withPad: " ", startingAt: 0),
                    (item.userID ?? "-").padding(toLength: 21, withPad: " ", startingAt: 0),
                    (item.spaceID ?? "-").padding(toLength: 38, withPad: " ", startingAt: 0),
                    item.reason.padding(toLength: 18, withPad: " ", startingAt: 0),
                    String(item.attempts).padding(toLength: 10, withPad: " ", startingAt: 0),
                    String(item.ops).padding(toLength: 5, withPad: " ", startingAt: 0),
                    item.deadAt.padding(toLength: 26, withPad: " ", startingAt: 0),
                    String((item.lastError ?? "").prefix(60)),
                ]
                print(columns.joined())
            }
            if page.nextCursor != nil { print("… more: raise --limit") }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show one dead letter with its payload and attempts (JSON).")
        @Argument(help: "The job id (or dead-letter id).") var id: DeadLetterID

        func run() async throws {
            guard let detail = try await withOffice({ try await $0.detail(id: id) }) else {
                throw ValidationError("no dead letter \(id)")
            }
            try printJSON(detail)
        }
    }

    struct Replay: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Replay one dead job (attempts reset), or every one a filter selects.")
        @Argument(help: "The job id; omit it to replay by filter.") var id: DeadLetterID?
        @OptionGroup var filter: Filter
        @Flag(help: "With a filter: count, do not replay.") var dryRun = false

        func validate() throws {
            if id != nil, !filter.filter.isEmpty || dryRun { throw ValidationError("give a job id or a filter, not both") }
            if id == nil, filter.filter.isEmpty { throw ValidationError("a filter is required: --user, --space, --reason or --dead-before") }
        }

        func run() async throws {
            if let id {
                switch try await withOffice({ try await $0.replay(id: id, actor: syncctlActor) }) {
                case .replayed(let jobID): print("replayed \(jobID)")
                case .notFound: throw ValidationError("no dead job \(id)")
                case .namesNoJob: throw ValidationError("\(id) names no job that could run again; discard it")
                }
            } else {
                let result = try await withOffice {
                    try await $0.bulkReplay(filter: filter.filter, dryRun: dryRun, actor: syncctlActor)
                }
                print(dryRun ? "matched \(result.matched) (dry run: nothing replayed)" : "matched \(result.matched), replayed \(result.replayed)")
            }
        }
    }

    struct Discard: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Give up on a dead letter; its job says discarded.")
        @Argument(help: "The job id (or dead-letter id).") var id: DeadLetterID

        func run() async throws {
            guard try await withOffice({ try await $0.discard(id: id, actor: syncctlActor) }) else {
                throw ValidationError("no dead letter \(id)")
            }
            print("discarded \(id)")
        }
    }
}

struct Queues: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Depth and consumers of every queue of the job pipeline.")
    @Flag(help: "Print JSON.") var json = false

    func run() async throws {
        let queues = try await withOffice { try await $0.queues() }
        if json { return try printJSON(QueueList(items: queues)) }
        print("QUEUE                  MESSAGES  CONSUMERS")
        for queue in queues {
            print(queue.name.padding(toLength: 23, withPad: " ", startingAt: 0)
                + String(queue.messages).padding(toLength: 10, withPad: " ", startingAt: 0) + String(queue.consumers))
        }
    }
}

struct Topology: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the broker topology as RabbitMQ definitions JSON (for review or pre-provisioning).")
    @Option(help: "The vhost to put in the definitions.") var vhost = "/"

    func run() async throws {
        let configuration = try Configuration.fromEnvironment()
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let json = BrokerDefinitions.json(retryDelays: configuration.retryDelays, vhost: vhost)
        print(String(decoding: try encoder.encode(json), as: UTF8.self))
    }
}
