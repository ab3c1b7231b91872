import NIOConcurrencyHelpers

/// How large the next piece of a download may be, so that a client that keeps up gets
/// large pieces and one that stops reading holds little.
///
/// Each download's `Pace` starts at `smallest` and doubles, up to `largest`, after every
/// piece its socket took as soon as it was flushed, and halves, down to `smallest`, after
/// one that had to wait for the client to read. The bytes of a piece beyond
/// `smallest` come from one budget shared by every download of the process, so however
/// many clients read fast and then stop, the pieces they hold add up to at most the budget
/// plus `smallest` each.
public final class DownloadPieces: Sendable {
    public static let smallest = 16 << 10
    public static let largest = 1 << 20

    public let budget: Int
    private let available: NIOLockedValueBox<Int>

    public init(budget: Int) {
        self.budget = budget
        available = NIOLockedValueBox(budget)
    }

    /// Bytes of the budget not held by any piece.
    public var availableBytes: Int { available.withLockedValue { $0 } }

    /// The size of a piece for a download whose pace asks for `wanted` bytes: `smallest`
    /// always, and as much more as the budget holds. Give it back once the piece is written.
    public func take(_ wanted: Int) -> Int {
        let extra = max(0, min(wanted, Self.largest) - Self.smallest)
        let granted = available.withLockedValue { available in
            let granted = min(extra, available)
            available -= granted
            return granted
        }
        return Self.smallest + granted
    }

    public func giveBack(_ piece: Int) {
        let extra = piece - Self.smallest
        guard extra > 0 else { return }
        available.withLockedValue { $0 += extra }
    }

    /// One download's piece size.
    public struct Pace: Sendable, Equatable {
        public private(set) var next = DownloadPieces.smallest

        public init() {}

        /// After a piece: whether the client kept up (the socket took it as it was flushed).
        public mutating func pieceWritten(keptUp: Bool) {
            next = keptUp ? min(next * 2, DownloadPieces.largest) : max(next / 2, DownloadPieces.smallest)
        }
    }
}
