import Hummingbird
import NIOCore

/// The gateway's request context: Hummingbird's basic one plus the client's address, which
/// the public endpoints' rate limit is keyed by.
struct GatewayRequestContext: RequestContext, RemoteAddressRequestContext {
    var coreContext: CoreRequestContextStorage
    let remoteAddress: SocketAddress?
    /// The connection, for what a response needs of it beyond the writer (its `WriteGate`).
    let channel: any Channel

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
        channel = source.channel
    }

    /// The address a per-client limit counts against (the connection's peer: behind a
    /// proxy, configure the proxy to limit per client instead).
    var clientAddress: String { remoteAddress?.ipAddress ?? "unknown" }
}
