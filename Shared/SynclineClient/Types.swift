import Foundation
import SyncModels

/// A record as this device shows it: what the server holds, with this device's pending
/// edits applied on top by the server's merge rules.
public struct LocalRecord: Sendable, Equatable {
    public let collection: String
    public let id: String
    /// The record's fields. (A deleted record is not shown.)
    public let data: [String: JSONValue]
    /// The server version this view is based on (0 before the server has it).
    public let version: Int64
    /// Where this device's edits to the record stand.
    public let syncState: RecordSyncState
    /// Whether this device has edits to it the server has not confirmed yet (and not set
    /// aside): `syncState == .pending`.
    public var hasPendingEdits: Bool { syncState == .pending }
    public let visibility: RecordState.PublicVisibility
    public let publicID: String?
    public let canFork: Bool
    public let forkedFrom: String?
}

/// Where a device's edits to a record stand.
public enum RecordSyncState: Sendable, Equatable {
    /// What shows is what the server confirmed (or brought in a pull).
    case synced
    /// Some edit waits for the server's confirmation.
    case pending
    /// Some edit was refused by the server (`reason`); it still shows, until the app
    /// retries it (`retry(opID:)`) or drops it (`drop(opID:)`).
    case setAside(reason: String)
}

/// Something the app should know about an edit or a job, delivered on `SyncClient.events`.
public enum SyncEvent: Sendable, Equatable {
    /// An `if_version` precondition failed: the edit was not applied; `current` is the
    /// server's record (nil when it does not exist).
    case conflict(opID: String, current: RecordView?)
    /// The server applied the job but refused this op, with its reason code.
    case rejected(opID: String, reason: String)
    /// The server refused the op as invalid (400/413/422). It waits in `setAside()`, where
    /// the app can retry or drop it; the ops after it went on.
    case setAside(opID: String, reason: String)
    /// A job was dead-lettered; its ops wait in `setAside()`.
    case jobDead(jobID: String, opIDs: [String])
    /// A pull ended: the local store is up to date with the server as of `cursor`.
    case pulled(cursor: String)
    /// The space answered 404 — deleted, or this user is no longer a member: its local
    /// records and unsent edits are gone and the client stopped syncing.
    case spaceGone(spaceID: String)
    /// Edits this device made in a space that went away before the server applied them
    /// (it was deleted, or this user was removed): they are lost with the space. Comes
    /// just before `.spaceGone`.
    case editsLost(spaceID: String, opIDs: [String])
    /// An upload's progress: `sent` of `total` bytes of the file `sha256`.
    case uploadProgress(sha256: String, sent: Int64, total: Int64)
    /// The server holds the file: the ops referencing it go with the next push.
    case uploaded(sha256: String)
    /// The server refused the file (too large, over the space's quota): the ops that
    /// reference it are set aside with `reason` (each also reported by `.setAside`).
    case uploadRefused(sha256: String, reason: String)
    /// A typed read (`fetch`, `observe`, `LiveQuery`) left a record out: its data does not
    /// decode as the record type (`detail` says where). Once per version of the record.
    case undecodable(UndecodableRecord)
}

/// A record a typed read left out because its data does not decode as the record type —
/// for example a record another version of the app wrote, or one a patch brought back
/// after a concurrent delete, holding only the patched fields.
public struct UndecodableRecord: Sendable, Equatable, Hashable {
    public let collection: String
    public let id: String
    /// The version of the record that did not decode.
    public let version: Int64
    /// Which field, and what is wrong with it.
    public let detail: String
}

/// Why an edit has not synced yet: what the app can show its user.
public struct SyncStatus: Sendable, Equatable {
    /// Ops not yet confirmed by the server (set-aside ops not included).
    public let pendingOps: Int
    /// How long the oldest of them has waited, in seconds.
    public let oldestPendingAge: Double?
    /// When the server last confirmed a job of this device, or a push-and-pull pass last
    /// succeeded; set together with the confirmation, so `pendingOps` never reaches 0
    /// through a sync while this is still nil.
    public let lastSyncAt: Date?
    /// Why the last sync pass failed, to act on (cleared by the next success); `lastError`
    /// says it in words.
    public let error: SyncError?
    /// The last failure (network, auth, server) in words, cleared by the next success.
    public let lastError: String?
    /// The trace id (32 hex digits) the last push went out with, in its `traceparent`:
    /// what the operator looks for in the server's logs (`trace.id`) and traces. Every
    /// retry of the same batch keeps it.
    public let lastPushTraceID: String?
    /// Ops the server refused, waiting for the app to retry or drop them.
    public let setAsideOps: Int
    /// Whether the live stream is connected.
    public let live: Bool
    /// Files of this device waiting to be uploaded, and their bytes.
    public let pendingUploads: Int
    public let pendingUploadBytes: Int64
}

/// Why a sync pass failed, as an app tells its user: offline is not signed out, and
/// neither is the server having trouble.
public enum SyncError: Sendable, Equatable {
    /// No answer: no network, the server unreachable or down, a request timed out.
    case offline
    /// The server refused the user's token, a fresh one too (or the token provider threw):
    /// the user signs in again.
    case signInRequired
    /// The server asked this device to slow down (429), for `retryAfter` seconds when it said.
    case rateLimited(retryAfter: Double?)
    /// The server answered with an error of its own (5xx): it is up, but not well.
    case serverError(status: Int)
    /// The space is gone: deleted, or this user is no longer a member.
    case spaceGone
    /// An answer the client did not expect, or a file of its own it could not read
    /// (`lastError` says which).
    case unexpected

    /// The error an answer's status means (a status that is no success).
    init(status: Int, retryAfter: Double?) {
        switch status {
        case 401: self = .signInRequired
        case 429: self = .rateLimited(retryAfter: retryAfter)
        case 500...599: self = .serverError(status: status)
        default: self = .unexpected
        }
    }

    /// The error a failed call means.
    init(_ error: any Error) {
        switch error {
        case is ServerAPI.TokenUnavailable: self = .signInRequired
        case ClientError.spaceGone: self = .spaceGone
        case ClientError.server(let status, _): self.init(status: status, retryAfter: nil)
        case is URLError, is CancellationError: self = .offline
        default: self = .unexpected
        }
    }
}

/// An op the server refused, kept for the app.
public struct SetAsideOp: Sendable, Equatable {
    public let opID: String
    public let collection: String
    public let id: String
    public let type: OpType
    public let reason: String
}

/// How a client reaches its server and where it keeps its data.
public struct ClientConfiguration: Sendable {
    /// The gateway, e.g. `https://sync.example.com`.
    public var gatewayURL: URL
    /// The fanout's stream endpoint base (nil: no live stream, pull by polling only).
    public var fanoutURL: URL?
    /// The SQLite file of the local store (created when missing); one per space.
    /// `":memory:"` keeps the store in memory (previews, tests): gone with the client.
    public var databasePath: String
    /// The shared space this client syncs (nil: the user's personal space).
    public var spaceID: String?
    /// A device id this app already registered (another space's client's `deviceID`), so
    /// one phone is one device in every space; nil: registered on first contact.
    public var deviceID: String?
    /// Supplies a bearer token; `refresh` is true after the server answered 401.
    public var tokenProvider: @Sendable (_ refresh: Bool) async throws -> String
    public var deviceName: String
    public var platform: String
    /// Pull this often when no stream is connected (nil: never poll).
    public var pollInterval: Double?
    /// The fanout's heartbeat interval; a stream silent for twice this is reconnected.
    public var heartbeatInterval: Double
    /// The wall clock (tests give a drifting one).
    public var now: @Sendable () -> Date
    /// Indexes on record fields, for the queries the app runs often (see `LocalIndex`).
    public var indexes: [LocalIndex]
    /// The most bytes of downloaded (and uploaded) files kept on the device; files waiting
    /// to be uploaded are kept whatever their size.
    public var blobCacheBytes: Int64

    public init(
        gatewayURL: URL, fanoutURL: URL? = nil, databasePath: String, spaceID: String? = nil, deviceID: String? = nil,
        tokenProvider: @escaping @Sendable (_ refresh: Bool) async throws -> String,
        deviceName: String = "device", platform: String = "swift", pollInterval: Double? = 30,
        heartbeatInterval: Double = 30, now: @escaping @Sendable () -> Date = { Date() }, indexes: [LocalIndex] = [],
        blobCacheBytes: Int64 = 512 << 20
    ) {
        self.blobCacheBytes = blobCacheBytes
        self.gatewayURL = gatewayURL
        self.fanoutURL = fanoutURL
        self.databasePath = databasePath
        self.spaceID = spaceID
        self.deviceID = deviceID
        self.tokenProvider = tokenProvider
        self.deviceName = deviceName
        self.platform = platform
        self.pollInterval = pollInterval
        self.heartbeatInterval = heartbeatInterval
        self.now = now
        self.indexes = indexes
    }
}
