/// Settings every gateway a test runs starts with, in a process of its own or in the
/// test's: rate limits off unless a test sets them (load tests push as fast as they can),
/// and an unpublished job relayed after a second.
public enum TestSettings {
    public static let services = [
        "RATE_LIMIT_PUSH": "off", "RATE_LIMIT_STREAMS": "off", "RATE_LIMIT_PUBLIC": "off", "RATE_LIMIT_PUBLIC_IDS": "off",
        "RELAY_AFTER": "1s",
    ]
}
