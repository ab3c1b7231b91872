import AsyncHTTPClient
import Auth
import BrokerTopology
import Foundation
import Logging
import Metrics
import Persistence
import ServiceLifecycle
import ServiceSupport
import SyncModels

/// Delivers the record feeds: every `poll`, leases the positions behind their space's
/// counter, and for each posts the next batch of changes, signed like a webhook, to the
/// feed's endpoint; the position moves only when the receiver answers 2xx. Failures retry
/// by the job tiers (`RETRY_DELAYS`) and after `MAX_ATTEMPTS` stop the position with a dead
/// letter (`queue=feed`). Deliveries run side by side, a few per feed, with the webhook
/// deadline: a slow or dead receiver holds only its own feed's places, never another
/// feed's, and never a device's (feeds read committed records, after the fact).
/// Any number of fanout replicas share the work through the leases.
struct FeedDelivery: Service {
    let feeds: FeedStore
    let configuration: Configuration
    let settings: FeedSettings
    let timeout: Double
    let logger: Logger

    /// How long a lease lasts: past the deadline of one delivery and its bookkeeping.
    var lease: Double { timeout * 2 + 10 }

    func run() async throws {
        // Made as webhooks' is: no redirect followed (it could lead to a private address), the deadline.
        let http = WebhookDispatcher.makeClient(WebhookLimits(timeout: timeout, perUser: settings.perFeed, perHost: settings.perFeed))
        await cancelWhenGracefulShutdown {
            await deliverUntilCancelled(with: http)
        }
        try? await http.shutdown()
    }

    private func deliverUntilCancelled(with http: HTTPClient) async {
        await withTaskGroup(of: FeedStore.Due?.self) { group in
            var busy: [FeedID: Int] = [:]
            var running: [FeedStore.Due] = []
            var sleeping = false
            var lastDiscovery = Date.distantPast
            while !Task.isCancelled {
                if Date().timeIntervalSince(lastDiscovery) >= settings.discoverEvery {
                    lastDiscovery = Date()
                    do { try await feeds.discover() } catch { logger.warning("could not look for new spaces of feeds", metadata: ["error": "\(error)"]) }
                }
                let free = settings.concurrency - running.count
                if free > 0 {
                    do {
                        for due in try await feeds.claim(limit: free, perFeed: settings.perFeed, busy: busy, lease: lease) {
                            busy[due.feed, default: 0] += 1
                            running.append(due)
                            group.addTask { await deliver(due, with: http); return due }
                        }
                    } catch {
                        logger.warning("could not read the feeds due", metadata: ["error": "\(error)"])
                    }
                }
                if !sleeping {
                    sleeping = true
                    group.addTask { [poll = settings.poll] in
                        try? await Task.sleep(for: .seconds(poll))
                        return nil
                    }
                }
                guard let finished = await group.next() else { break }
                if let due = finished {
                    busy[due.feed, default: 1] -= 1
                    if busy[due.feed] == 0 { busy[due.feed] = nil }
                    running.removeAll { $0 == due }
                } else {
                    sleeping = false
                }
            }
            group.cancelAll()
            // Leases of deliveries cut short go back, so another replica takes them at once.
            try? await feeds.release(running)
        }
    }

    /// One batch of one position: read, post, move or record the failure.
    func deliver(_ due: FeedStore.Due, with http: HTTPClient) async {
        var through = due.version
        do {
            let (records, reached) = try await feeds.batch(due, limit: settings.batch)
            through = reached
            if !records.isEmpty {
                try await post(FeedBatch(
                    feedID: due.feed.description, spaceID: due.space.description, fromVersion: due.version, throughVersion: reached,
                    changes: records), to: due, with: http)
                Counter(label: "syncline_feed_changes_total").increment(by: records.count)
            }
            try await feeds.delivered(due, through: reached)
            Counter(label: "syncline_feed_batches_total", dimensions: [("outcome", "delivered")]).increment()
        } catch is CancellationError {
            return
        } catch {
            if Task.isCancelled { return }
            await failed(due, error: "\(error)", through: through)
        }
    }

    struct ReceiverRefused: Error, CustomStringConvertible {
        let status: UInt
        var description: String { "the receiver answered HTTP \(status)" }
    }

    struct PrivateAddress: Error, CustomStringConvertible {
        var description: String { "the feed's URL resolves to a private address" }
    }

    private func post(_ batch: FeedBatch, to due: FeedStore.Due, with http: HTTPClient) async throws {
        if !configuration.allowPrivateWebhooks {
            guard let host = URLComponents(string: due.url)?.host, !(await WebhookAddresses.resolvesToPrivateOffThePool(host: host)) else {
                throw PrivateAddress()
            }
        }
        let request = HTTPClientRequest.signedPost(to: due.url, body: Array(try JSONCoding.encode(batch)), secret: due.secret)
        let response = try await http.execute(request, timeout: .milliseconds(Int64(timeout * 1000)))
        // The answer is drained (up to 64 KiB) so that its connection is kept, not read.
        _ = try? await response.body.collect(upTo: 1 << 16)
        guard (200..<300).contains(response.status.code) else { throw ReceiverRefused(status: response.status.code) }
    }

    private func failed(_ due: FeedStore.Due, error: String, through: Int64) async {
        let attempts = due.attempts + 1
        let stops = attempts >= configuration.maxAttempts
        let retryIn = stops ? nil : SynclineTopology.retryDelay(afterAttempt: attempts, delays: configuration.retryDelays)
        Counter(label: "syncline_feed_batches_total", dimensions: [("outcome", stops ? "dead" : "failed")]).increment()
        let metadata: Logger.Metadata = [
            "feed.id": "\(due.feed)", "space.id": "\(due.space)", "feed.version": "\(due.version)", "error": "\(error)",
            "attempts": "\(attempts)",
        ]
        if stops {
            logger.error("feed delivery dead-lettered; replay it to go on", metadata: metadata)
        } else {
            logger.info("feed delivery failed; retrying", metadata: metadata)
        }
        do {
            try await feeds.failed(due, error: String(error.prefix(1000)), retryIn: retryIn, through: through)
        } catch {
            // The lease runs out and the batch is tried again.
            logger.warning("could not record a failed feed delivery", metadata: ["error": "\(error)"])
        }
    }
}

/// What one delivery carries: the changes of one space after `from_version`, through
/// `through_version`, in version order. A receiver deduplicates by `(space_id, version)`.
struct FeedBatch: Encodable {
    let feedID: String
    let spaceID: String
    let fromVersion: Int64
    let throughVersion: Int64
    let changes: [BackendRecord]

    enum CodingKeys: String, CodingKey {
        case feedID = "feed_id", spaceID = "space_id", fromVersion = "from_version", throughVersion = "through_version", changes
    }
}

/// How the feeds are delivered (`FEED_POLL`, `FEED_BATCH`, `FEED_CONCURRENCY`, `FEED_PER_FEED`).
struct FeedSettings: Sendable, Equatable {
    var poll: Double
    var batch: Int
    var concurrency: Int
    var perFeed: Int
    /// How often spaces a feed may have missed are looked for (a new space normally gets
    /// its position when it is made).
    var discoverEvery: Double = 30

    init(_ reader: EnvironmentReader) throws {
        poll = try reader.duration("FEED_POLL", "500ms")
        batch = try reader.int("FEED_BATCH", 500)
        concurrency = try reader.int("FEED_CONCURRENCY", 16)
        perFeed = try reader.int("FEED_PER_FEED", 4)
    }
}
