import ServiceSupport

/// What the services that serve HTTP (gateway, fanout) read besides the shared settings.
public struct HTTPServerSettings: Sendable {
    /// Origins whose browsers may call the API (`*` for any); empty: no CORS headers.
    public var corsAllowedOrigins: [String]
    /// A connection that sends nothing for this long (mid-headers, mid-body, or idle
    /// between requests) is closed.
    public var idleTimeout: Double
    /// Connections held at once, in total and per client address (`MAX_CONNECTIONS`,
    /// `MAX_CONNECTIONS_PER_ADDRESS`); beyond them a new connection is closed at once. The
    /// total's default is the open-files limit the service raises itself to, less
    /// `ConnectionLimits.reservedDescriptors`.
    public var connectionLimits: ConnectionLimits

    public init(_ reader: EnvironmentReader) throws {
        corsAllowedOrigins = reader.list("CORS_ALLOWED_ORIGINS")
        idleTimeout = try reader.duration("HTTP_IDLE_TIMEOUT", "30s")
        connectionLimits = ConnectionLimits(
            total: try reader.int("MAX_CONNECTIONS", ConnectionLimits.defaultTotal(descriptorLimit: DescriptorLimit.hardLimit)),
            perAddress: try reader.int("MAX_CONNECTIONS_PER_ADDRESS", 1000))
    }
}
