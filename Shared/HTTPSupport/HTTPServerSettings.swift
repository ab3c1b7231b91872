import ServiceSupport

/// What the services that serve HTTP (gateway, fanout) read besides the shared settings.
public struct HTTPServerSettings: Sendable {
    /// Origins whose browsers may call the API (`*` for any); empty: no CORS headers.
    public var corsAllowedOrigins: [String]
    /// A connection that sends nothing for this long (mid-headers, mid-body, or idle
    /// between requests) is closed.
    public var idleTimeout: Double

    public init(_ reader: EnvironmentReader) throws {
        corsAllowedOrigins = reader.list("CORS_ALLOWED_ORIGINS")
        idleTimeout = try reader.duration("HTTP_IDLE_TIMEOUT", "30s")
    }
}
