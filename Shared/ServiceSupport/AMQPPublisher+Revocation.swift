import AMQPBridge
import Logging
import SyncModels

extension AMQPPublisher {
    /// Tells every fanout replica to end the streams of a revoked device (or of every
    /// device of a deleted account). The revocation itself is already committed: a stream
    /// that misses this announcement is refused when it reconnects, so a broker outage is
    /// logged, not thrown.
    public func announce(_ revocation: DeviceRevokedEvent, logger: Logger) async {
        do {
            try await publish([SynclineTopology.revocationMessage(revocation)])
        } catch {
            logger.warning("cannot announce a revocation to fanout; its streams end when they reconnect",
                           metadata: ["error": "\(error)"])
        }
    }
}
