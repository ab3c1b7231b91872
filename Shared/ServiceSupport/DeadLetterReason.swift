/// Reasons a message is dead-lettered without (further) attempts.
public enum DeadLetterReason {
    /// The message is not a job message (not JSON, no job id).
    public static let invalidMessage = "invalid_message"
    /// The message names a job no row exists for.
    public static let unknownJob = "unknown_job"
    /// The job failed transiently `MAX_ATTEMPTS` times.
    public static let maxAttempts = "max_attempts"
    /// The broker redelivered the message past its delivery limit (workers kept dying on it).
    public static let deliveryLimit = "delivery_limit"

    /// The reasons the worker itself gives, counted from zero in
    /// `syncline_dead_letters_total` before any happens (so alerts see the series).
    public static let all = [invalidMessage, unknownJob, maxAttempts, deliveryLimit]
}
