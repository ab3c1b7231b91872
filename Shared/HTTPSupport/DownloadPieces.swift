import NIOConcurrencyHelpers

/// How large the next piece of a download may be, so that a client that keeps up gets
/// large pieces and one that stops reading holds little.
///
/// Each download's `Pace` starts at `smallest` and doubles, up to `largest`, after every
/// piece the client took within `steadyWait` of being handed it, and halves, down to
/// `smallest`, after one it took longer over: a piece settles at about `steadyWait` of the
/// client's speed. The bytes of a piece beyond
/// `smallest` come from one budget shared by every download of the process, so however
/// many clients read fast and then stop, the pieces they hold add up to at most the budget
/// plus `smallest` each.
public final class DownloadPieces: Sendable {
    public static let smallest = 4 << 10
    public static let largest = 1 << 20
    public static let steadyWait = Duration.milliseconds(50)

    public let budget: Int
    private struct State {
        var available: Int
        var downloads = 0
    }
    private let state: NIOLockedValueBox<State>

    public init(budget: Int) {
        self.budget = budget
        state = NIOLockedValueBox(State(available: budget))
    }

    /// Bytes of the budget not held by any piece.
    public var availableBytes: Int { state.withLockedValue { $0.available } }

    public func downloadStarted() {
        state.withLockedValue { $0.downloads += 1 }
    }

    /// Whether it was the last download under way.
    public func downloadEnded() -> Bool {
        state.withLockedValue { state in
            state.downloads -= 1
            return state.downloads == 0
        }
    }

    /// The size of a piece for a download whose pace asks for `wanted` bytes: `smallest`
    /// always, and as much more as the budget holds. Give it back once the piece is written.
    public func take(_ wanted: Int) -> Int {
        let extra = max(0, min(wanted, Self.largest) - Self.smallest)
        let granted = state.withLockedValue { state in
            let granted = min(extra, state.available)
            state.available -= granted
            return granted
        }
        return Self.smallest + granted
    }

    public func giveBack(_ piece: Int) {
        let extra = piece - Self.smallest
        guard extra > 0 else { return }
        state.withLockedValue { $0.available += extra }
    }

    /// One download's piece size.
    public struct Pace: Sendable, Equatable {
        public private(set) var next = DownloadPieces.smallest

        public init() {}

        /// After a piece: how long the writer waited for the client to take the one before.
        public mutating func pieceWritten(waited: Duration) {
            next = waited < DownloadPieces.steadyWait
                ? min(next * 2, DownloadPieces.largest) : max(next / 2, DownloadPieces.smallest)
        }
    }
}
