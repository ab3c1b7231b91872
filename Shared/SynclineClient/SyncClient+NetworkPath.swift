#if canImport(Network)
import Foundation
import Network

/// On Apple platforms the client hears the network come back itself: `NWPathMonitor`
/// calls `networkAvailable()` when the path becomes usable again. (Linux has no Network
/// framework: there the app calls `networkAvailable()`, or `sync()`. This file is not
/// compiled on the Linux machines Syncline is built and tested on.)
extension SyncClient {
    func watchNetworkPath() -> NWPathMonitor {
        let monitor = NWPathMonitor()
        let transitions = PathTransitions()
        monitor.pathUpdateHandler = { [weak self] path in
            guard transitions.becameSatisfied(path.status == .satisfied), let self else { return }
            Task { await self.networkAvailable() }
        }
        monitor.start(queue: DispatchQueue(label: "syncline.network-path"))
        return monitor
    }
}

/// Whether the path has just become usable (not its first report, not a repeat).
private final class PathTransitions: @unchecked Sendable {
    // @unchecked: touched only from the monitor's serial queue.
    private var satisfied: Bool?

    func becameSatisfied(_ now: Bool) -> Bool {
        defer { satisfied = now }
        return now && satisfied == false
    }
}
#endif
