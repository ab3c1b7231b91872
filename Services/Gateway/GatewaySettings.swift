import BlobStorage
import HTTPSupport
import ServiceSupport

/// What the gateway reads besides the shared settings.
struct GatewaySettings: Sendable {
    var http: HTTPServerSettings
    /// Intake transactions a gateway runs at once, each committing the pushes that
    /// waited for it.
    var intakeConcurrency: Int
    var maxClockSkew: Double
    var pushRateLimit: RateLimit
    var publicRateLimit: RateLimit
    /// Publish and fork ops, per user: each costs a token, so guessing public ids through
    /// pushes is no faster than through public reads.
    var publicIDRateLimit: RateLimit
    /// How long a committed job may stay unpublished before the relay publishes it.
    var relayAfter: Double
    /// How long `DELETE /v1/me` erases inside the request before it answers 202.
    var accountDeletionInline: Double
    /// Where new files go (`BLOB_STORE`).
    var blobStore: BlobStoreLocation
    /// The largest file taken (`BLOB_MAX_BYTES`).
    var blobMaxBytes: Int64
    /// The bytes one space's files may take (`SPACE_BLOB_QUOTA`).
    var spaceBlobQuota: Int64

    init(_ reader: EnvironmentReader) throws {
        http = try HTTPServerSettings(reader)
        intakeConcurrency = try reader.int("INTAKE_CONCURRENCY", 2)
        maxClockSkew = try reader.duration("MAX_CLOCK_SKEW", "5m")
        pushRateLimit = try reader.rate("RATE_LIMIT_PUSH", "20/s,burst=40")
        publicRateLimit = try reader.rate("RATE_LIMIT_PUBLIC", "50/s,burst=100")
        publicIDRateLimit = try reader.rate("RATE_LIMIT_PUBLIC_IDS", "10/s,burst=500")
        relayAfter = try reader.duration("RELAY_AFTER", "2s")
        accountDeletionInline = try reader.duration("ACCOUNT_DELETION_INLINE", "2s")
        blobStore = try reader.blobStore()
        blobMaxBytes = try reader.bytes("BLOB_MAX_BYTES", "100MiB")
        spaceBlobQuota = try reader.bytes("SPACE_BLOB_QUOTA", "5GiB")
    }
}
