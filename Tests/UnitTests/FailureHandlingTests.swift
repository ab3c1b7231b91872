import AMQPBridge
import BrokerTopology
import HTTPSupport
import Logging
import Persistence
import PQBridge
import ServiceSupport
import SyncModels
import Testing
import Worker

/// The one place failures are classified, and the retry tiers they lead to.
struct FailureHandlingTests {
    @Test(arguments: [
        (PGError(code: .connection, message: "refused"), JobFailure.outage(reason: "database_unavailable")),
        (PGError(code: .server, sqlState: "57P01", message: "admin shutdown"), .outage(reason: "database_unavailable")),
        (PGError(code: .server, sqlState: "57P03", message: "starting up"), .outage(reason: "database_unavailable")),
        (PGError(code: .server, sqlState: "08006", message: "connection failure"), .outage(reason: "database_unavailable")),
        (PGError(code: .server, sqlState: "40001", message: "serialization"), .transient(reason: "serialization_failure")),
        (PGError(code: .server, sqlState: "40P01", message: "deadlock"), .transient(reason: "deadlock")),
        (PGError(code: .server, sqlState: "55P03", message: "lock"), .transient(reason: "lock_not_available")),
        (PGError(code: .server, sqlState: "23505", message: "unique"), .permanent(reason: "database_error_23505")),
        (PGError(code: .server, sqlState: "42703", message: "no such column"), .transient(reason: "schema_not_migrated")),
        (PGError(code: .server, sqlState: "42P01", message: "no such table"), .transient(reason: "schema_not_migrated")),
        (PGError(code: .decoding, message: "ops unreadable"), .permanent(reason: "invalid_payload")),
    ])
    func databaseErrors(error: PGError, expected: JobFailure) {
        #expect(JobFailure.classify(error) == expected)
    }

    /// What each failure comes to: an outage hands the job back uncounted, a transient
    /// failure retries until the last attempt and then dead-letters, a permanent one
    /// dead-letters at once under its own reason.
    @Test func aFailedAttemptSettlesByItsKindAndCount() {
        #expect(JobSettlement.after(.outage(reason: "database_unavailable"), attempt: 5, maxAttempts: 5) == .handBack)
        #expect(JobSettlement.after(.transient(reason: "deadlock"), attempt: 1, maxAttempts: 5) == .retry)
        #expect(JobSettlement.after(.transient(reason: "deadlock"), attempt: 4, maxAttempts: 5) == .retry)
        #expect(JobSettlement.after(.transient(reason: "deadlock"), attempt: 5, maxAttempts: 5) == .deadLetter(.maxAttempts))
        #expect(JobSettlement.after(.permanent(reason: "invalid_payload"), attempt: 1, maxAttempts: 5)
                == .deadLetter(DeadLetterReason(rawValue: "invalid_payload")))
    }

    /// A request that meets a schema older than this build is answered 503 with
    /// Retry-After (an upgrade in progress), never 500; a real bug still is a 500.
    @Test func aSchemaNotYetMigratedIsAnsweredAsUnavailable() {
        let logger = Logger(label: "test")
        for state in ["42P01", "42703", "42883"] {
            let problem = APIError.problem(for: PGError(code: .server, sqlState: state, message: "undefined"), logger: logger)
            #expect(problem.status == .serviceUnavailable && problem.code == .unavailable && problem.retryAfterSeconds != nil, "\(state)")
        }
        #expect(APIError.problem(for: PGError(code: .server, sqlState: "42601", message: "syntax"), logger: logger).status
                == .internalServerError)
    }

    @Test func brokerAndOtherErrors() {
        #expect(JobFailure.classify(AMQPError(.connection, "reset")) == .transient(reason: "broker"))
        #expect(JobFailure.classify(AMQPError(.notConfirmed, "nacked")) == .transient(reason: "broker"))
        #expect(JobFailure.classify(CancellationError()) == .outage(reason: "shutting_down"))
        struct Odd: Error {}
        #expect(JobFailure.classify(Odd()) == .permanent(reason: "internal_error"))
        // Each layer's own errors name their cause: records purged mid-apply are worth
        // another attempt; ops that cannot be read are not.
        #expect(JobFailure.classify(ApplyError.recordsGoneAtWrite(count: 2)) == .transient(reason: "records_gone"))
        #expect(JobFailure.classify(UnreadableJob(jobID: .random())) == .permanent(reason: "invalid_payload"))
    }

    @Test func attemptNPlusOneWaitsTheNthDelayTheLastRepeating() {
        let delays = [1.0, 5, 25, 120]
        let queues = (1...6).map { SynclineTopology.retryQueue(afterAttempt: $0, delays: delays).name }
        #expect(queues == ["sync.retry.1s", "sync.retry.5s", "sync.retry.25s", "sync.retry.2m", "sync.retry.2m", "sync.retry.2m"])
    }

    @Test func oneRetryQueuePerTierEachWithItsOwnTTLDeadLetteringBackToTheJobs() {
        let topology = SynclineTopology.topology(retryDelays: [0.3, 1, 1, 60])
        let retry = topology.queues.filter { $0.name.hasPrefix("sync.retry.") }
        #expect(retry.map(\.name) == ["sync.retry.300ms", "sync.retry.1s", "sync.retry.1m"])
        #expect(retry.map { $0.arguments["x-message-ttl"] } == [.int(300), .int(1000), .int(60000)])
        for queue in retry {
            #expect(queue.arguments["x-dead-letter-exchange"] == .string(SynclineTopology.jobsExchange))
            #expect(queue.arguments["x-dead-letter-strategy"] == .string("at-least-once"))
        }
        // The jobs queue's own backstop dead-letters somewhere a worker reads, never nowhere.
        let jobs = topology.queues.first { $0.name == SynclineTopology.jobsQueue }
        #expect(jobs?.arguments["x-dead-letter-exchange"] == .string(SynclineTopology.deadLetterExchange))
        #expect(jobs?.arguments["x-dead-letter-routing-key"] == .string(SynclineTopology.exhaustedRoutingKey))
        #expect(topology.bindings.contains { $0.queue == SynclineTopology.exhaustedQueue && $0.routingKey == SynclineTopology.exhaustedRoutingKey })
    }

    @Test func durationLabels() {
        #expect([0.25, 1, 5, 90, 120, 3600, 86400].map(Durations.label) == ["250ms", "1s", "5s", "90s", "2m", "1h", "1d"])
    }

    @Test func aMessageThatNamesNoJobGetsTheSameDeadLetterIDEachTime() {
        let body = Array("not json".utf8)
        let id = SynclineTopology.deadLetterID(jobID: nil, body: body)
        #expect(id == SynclineTopology.deadLetterID(jobID: nil, body: body))
        #expect(id != SynclineTopology.deadLetterID(jobID: nil, body: Array("other".utf8)))
        #expect(id.count == 36)
        let job = JobID("6DA9EBDA-2471-4183-8C54-77519EBD4EDF")
        #expect(SynclineTopology.deadLetterID(jobID: job, body: body) == "6da9ebda-2471-4183-8c54-77519ebd4edf")
        #expect(SynclineTopology.jobID(inMessage: Array(#"{"job_id":"6DA9EBDA-2471-4183-8C54-77519EBD4EDF"}"#.utf8)) == job)
        #expect(SynclineTopology.jobID(inMessage: body) == nil)
    }
}
