/// Why a message was dead-lettered: the `reason` a dead letter is listed and filtered by,
/// and the label of `syncline_dead_letters_total` and `syncline_webhook_dead_letters_total`.
/// The reasons below are the consumers' own; a job that fails permanently is parked with
/// the reason its failure was classified by (`database_error_23514`, `invalid_payload`).
public struct DeadLetterReason: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String

    public init(rawValue: String) { self.rawValue = rawValue }

    public var description: String { rawValue }

    /// The message is not one its consumer reads (not JSON, no job id, not a webhook delivery).
    public static let invalidMessage = DeadLetterReason(rawValue: "invalid_message")
    /// The message names a job no row exists for.
    public static let unknownJob = DeadLetterReason(rawValue: "unknown_job")
    /// The job (or webhook delivery) failed transiently `MAX_ATTEMPTS` times.
    public static let maxAttempts = DeadLetterReason(rawValue: "max_attempts")
    /// The broker redelivered the message past its delivery limit (workers kept dying on it).
    public static let deliveryLimit = DeadLetterReason(rawValue: "delivery_limit")
    /// A webhook's host resolves to a private or loopback address.
    public static let privateAddress = DeadLetterReason(rawValue: "private_address")

    /// The reasons the worker gives of its own, counted from zero before any happens (so
    /// alerts see the series).
    public static let ofJobs: [DeadLetterReason] = [.invalidMessage, .unknownJob, .maxAttempts, .deliveryLimit]
    /// The reasons fanout gives for webhook deliveries, likewise.
    public static let ofWebhooks: [DeadLetterReason] = [.invalidMessage, .privateAddress, .maxAttempts]
}
