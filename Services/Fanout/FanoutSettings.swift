import HTTPSupport
import ServiceSupport

/// What fanout reads besides the shared settings.
struct FanoutSettings: Sendable {
    var http: HTTPServerSettings
    /// How often a stream without news gets a heartbeat.
    var streamHeartbeat: Double
    var streamRateLimit: RateLimit
    /// The most streams one user may hold open on one fanout replica.
    var streamsPerUser: Int
    /// Webhook deliveries' deadline and places.
    var webhooks: WebhookLimits
    /// How the record feeds are delivered.
    var feeds: FeedSettings

    init(_ reader: EnvironmentReader) throws {
        http = try HTTPServerSettings(reader)
        streamHeartbeat = try reader.duration("STREAM_HEARTBEAT", "30s")
        streamRateLimit = try reader.rate("RATE_LIMIT_STREAMS", "1/s,burst=10")
        streamsPerUser = try reader.int("STREAMS_PER_USER", 20)
        webhooks = WebhookLimits(
            timeout: try reader.duration("WEBHOOK_TIMEOUT", "5s"), perUser: try reader.int("WEBHOOKS_PER_USER", 4),
            perHost: try reader.int("WEBHOOKS_PER_HOST", 8))
        feeds = try FeedSettings(reader)
    }
}
