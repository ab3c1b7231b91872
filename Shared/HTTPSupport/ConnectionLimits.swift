import Metrics
import NIOConcurrencyHelpers
import NIOCore

/// How many connections a server holds at once: in total, and from one client address.
/// The total stays below the process's open-files limit, so that descriptors remain for
/// the database, the broker, files, and a new client's accept; the per-address limit keeps
/// one address from taking them all.
public struct ConnectionLimits: Sendable, Equatable {
    public var total: Int
    public var perAddress: Int

    public init(total: Int, perAddress: Int) {
        self.total = total
        self.perAddress = perAddress
    }

    /// Descriptors kept back from client connections: database and broker connections,
    /// files, and the process's own.
    public static let reservedDescriptors = 512

    /// The default total for a process allowed `descriptorLimit` open files: all but the
    /// reserved ones, and never fewer than 64.
    public static func defaultTotal(descriptorLimit: UInt64) -> Int {
        let reserved = UInt64(reservedDescriptors)
        return descriptorLimit >= reserved + 64 ? Int(clamping: descriptorLimit - reserved) : 64
    }

    /// The connections held now, and whether one more may be admitted.
    struct Count: Sendable, Equatable {
        var total = 0
        var byAddress: [String: Int] = [:]

        /// Admits a connection from `address` when both limits allow it.
        mutating func admit(_ address: String, within limits: ConnectionLimits) -> Bool {
            let held = byAddress[address, default: 0]
            guard total < limits.total, held < limits.perAddress else { return false }
            total += 1
            byAddress[address] = held + 1
            return true
        }

        mutating func release(_ address: String) {
            total = max(0, total - 1)
            guard let held = byAddress[address] else { return }
            byAddress[address] = held > 1 ? held - 1 : nil
        }
    }
}

/// The connections a server holds, counted across its event loops.
public final class ConnectionCounter: Sendable {
    public let limits: ConnectionLimits
    private let count = NIOLockedValueBox(ConnectionLimits.Count())

    public init(limits: ConnectionLimits) { self.limits = limits }

    /// Admits a connection from `address`; false when a limit is reached.
    public func admit(_ address: String) -> Bool {
        count.withLockedValue { $0.admit(address, within: limits) }
    }

    public func release(_ address: String) {
        count.withLockedValue { $0.release(address) }
    }

    /// Connections held now.
    public var total: Int { count.withLockedValue { $0.total } }
}

/// First in a connection's pipeline: admits it by its `ConnectionCounter`, or closes it at
/// once (no answer: the client sees its connection closed, and the descriptor is back).
public final class ConnectionLimitHandler: ChannelInboundHandler, RemovableChannelHandler {
    public typealias InboundIn = NIOAny

    private let counter: ConnectionCounter
    private var admitted: String?

    public init(counter: ConnectionCounter) { self.counter = counter }

    public func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { admit(context) }
    }

    public func channelActive(context: ChannelHandlerContext) {
        if admitted == nil { admit(context) }
        context.fireChannelActive()
    }

    public func channelInactive(context: ChannelHandlerContext) {
        release()
        context.fireChannelInactive()
    }

    public func handlerRemoved(context: ChannelHandlerContext) {
        // Removed with its pipeline when the connection closes; a connection that goes on
        // without it (nothing removes it today) would stay counted rather than escape.
        if !context.channel.isActive { release() }
    }

    private func admit(_ context: ChannelHandlerContext) {
        let address = context.channel.remoteAddress?.ipAddress ?? "unknown"
        if counter.admit(address) {
            admitted = address
        } else {
            Counter(label: "syncline_http_connections_refused_total").increment()
            context.close(promise: nil)
        }
    }

    private func release() {
        guard let address = admitted else { return }
        admitted = nil
        counter.release(address)
    }
}
