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

    /// Tells every fanout replica that these memberships ended. Best effort for the same
    /// reason: the membership is gone, so a stream that misses this gets no further pokes
    /// of the space and is refused it when it reconnects.
    public func announce(_ left: [SpaceLeftEvent], logger: Logger) async {
        guard !left.isEmpty else { return }
        do {
            try await publish(left.map(SynclineTopology.spaceLeftMessage))
        } catch {
            logger.warning("cannot announce the end of a membership to fanout", metadata: ["error": "\(error)"])
        }
    }
}
