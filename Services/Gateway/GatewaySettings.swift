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
    /// How long a response may wait on a client that reads nothing, and the bytes a second
    /// a request body must keep coming at (`TRANSFER_STALL_TIMEOUT`, `UPLOAD_MIN_RATE`).
    var transferLimits: TransferGuard.Limits
    /// The kernel's send buffer of each connection (`SEND_BUFFER`): what a client that stops
    /// reading can pin in the kernel, beyond the piece the gateway holds for it.
    var sendBuffer: Int
    /// Downloads of files at once, per user and per client address for public files
    /// (`DOWNLOADS_PER_USER`, `DOWNLOADS_PER_ADDRESS`); uploads at once per user
    /// (`UPLOADS_PER_USER`).
    /// The bytes that downloads' pieces may hold beyond 4 KiB each, all downloads
    /// together (`DOWNLOAD_BUFFER`).
    var downloadBuffer: Int
    var downloadsPerUser: Int
    var downloadsPerAddress: Int
    var uploadsPerUser: Int
    /// Unfinished tus uploads a user may have open, and how long one may rest
    /// (`OPEN_UPLOADS_PER_USER`, `UPLOAD_EXPIRY`).
    var openUploadsPerUser: Int
    var uploadExpiry: Double
    /// Open invitations a space may hold at once (`MAX_OPEN_INVITATIONS`).
    var maxOpenInvitations: Int
    /// The origin public files are served from (`PUBLIC_FILES_ORIGIN`); nil: the API's.
    var publicFilesOrigin: PublicFilesOrigin?
    /// A streaming replica for pulls and public reads (`DATABASE_READ_URL`); nil: the primary.
    var databaseReadURL: String?
    /// Pull pages read ahead and kept at once, all pulls together (`PULL_READ_AHEAD`).
    var pullReadAhead: Int

    init(_ reader: EnvironmentReader) throws {
        http = try HTTPServerSettings(reader)
        intakeConcurrency = try reader.int("INTAKE_CONCURRENCY", 2)
        maxClockSkew = try reader.duration("MAX_CLOCK_SKEW", "5m")
        pushRateLimit = try reader.rate("RATE_LIMIT_PUSH", "20/s,burst=40")
        publicRateLimit = try reader.rate("RATE_LIMIT_PUBLIC", "50/s,burst=100")
        publicIDRateLimit = try reader.rate("RATE_LIMIT_PUBLIC_IDS", "10/s,burst=100")
        relayAfter = try reader.duration("RELAY_AFTER", "2s")
        accountDeletionInline = try reader.duration("ACCOUNT_DELETION_INLINE", "2s")
        blobStore = try reader.blobStore()
        blobMaxBytes = try reader.bytes("BLOB_MAX_BYTES", "100MiB")
        spaceBlobQuota = try reader.bytes("SPACE_BLOB_QUOTA", "5GiB")
        transferLimits = TransferGuard.Limits(
            stallTimeout: try reader.duration("TRANSFER_STALL_TIMEOUT", "30s"),
            minimumRate: Double(try reader.bytes("UPLOAD_MIN_RATE", "1KiB")))
        sendBuffer = Int(try reader.bytes("SEND_BUFFER", "1MiB"))
        downloadBuffer = Int(try reader.bytes("DOWNLOAD_BUFFER", "2MiB"))
        downloadsPerUser = try reader.int("DOWNLOADS_PER_USER", 8)
        downloadsPerAddress = try reader.int("DOWNLOADS_PER_ADDRESS", 8)
        uploadsPerUser = try reader.int("UPLOADS_PER_USER", 4)
        openUploadsPerUser = try reader.int("OPEN_UPLOADS_PER_USER", 20)
        uploadExpiry = try reader.duration("UPLOAD_EXPIRY", "1h")
        maxOpenInvitations = try reader.int("MAX_OPEN_INVITATIONS", 100)
        publicFilesOrigin = try reader.publicFilesOrigin()
        databaseReadURL = reader.value("DATABASE_READ_URL")
        pullReadAhead = try reader.int("PULL_READ_AHEAD", 16)
    }
}
