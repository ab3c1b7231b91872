/// A hybrid logical clock reading: `<13-digit unix ms>-<5-digit counter>-<node>`.
/// Compared as a string, which the fixed-width fields make equal to comparing
/// `(milliseconds, counter, node)`.
public struct HLC: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let milliseconds: Int64
    public let counter: Int
    public let node: String

    public static let maxCounter = 99_999
    /// Where the node starts in a clock's text: after `<13-digit ms>-<5-digit counter>-`.
    public static let nodeOffset = 20

    public init?(milliseconds: Int64, counter: Int, node: String) {
        guard (0...9_999_999_999_999).contains(milliseconds),
              (0...Self.maxCounter).contains(counter),
              Names.isValidHLCNode(node)
        else { return nil }
        self.milliseconds = milliseconds
        self.counter = counter
        self.node = node
    }

    public init?(_ text: String) {
        let utf8 = Array(text.utf8)
        guard utf8.count >= 21, utf8[13] == UInt8(ascii: "-"), utf8[19] == UInt8(ascii: "-"),
              utf8[0..<13].allSatisfy(Self.isDigit), utf8[14..<19].allSatisfy(Self.isDigit),
              let ms = Int64(String(decoding: utf8[0..<13], as: UTF8.self)),
              let counter = Int(String(decoding: utf8[14..<19], as: UTF8.self)),
              Names.isValidHLCNode(String(decoding: utf8[20...], as: UTF8.self))
        else { return nil }
        self.init(milliseconds: ms, counter: counter, node: String(decoding: utf8[20...], as: UTF8.self))
    }

    private static func isDigit(_ byte: UInt8) -> Bool { byte >= 48 && byte <= 57 }

    public var description: String {
        let ms = String(milliseconds)
        let counterText = String(counter)
        return String(repeating: "0", count: 13 - ms.count) + ms + "-"
            + String(repeating: "0", count: 5 - counterText.count) + counterText + "-" + node
    }

    public static func < (lhs: HLC, rhs: HLC) -> Bool { lhs.description < rhs.description }
}

/// The HLC receive rule for one user: server stamps increase strictly and exceed every
/// client clock already accepted.
public struct HLCState: Sendable, Equatable {
    public var milliseconds: Int64
    public var counter: Int

    public init(milliseconds: Int64, counter: Int) {
        self.milliseconds = milliseconds
        self.counter = counter
    }

    /// Takes note of an accepted client clock.
    public mutating func observe(_ clock: HLC) {
        if (clock.milliseconds, clock.counter) > (milliseconds, counter) {
            milliseconds = clock.milliseconds
            counter = clock.counter
        }
    }

    /// The next server stamp for `node` at wall time `now` (unix ms).
    public mutating func next(now: Int64, node: String) -> HLC {
        if now > milliseconds {
            milliseconds = now
            counter = 0
        } else if counter < HLC.maxCounter {
            counter += 1
        } else {
            milliseconds += 1
            counter = 0
        }
        return HLC(milliseconds: milliseconds, counter: counter, node: node)!
    }
}

/// The total order of writes: `(hlc, op_id)`. Stored as `"<hlc> <op_id>"`, whose string
/// order is the same because a space sorts before every character an HLC may contain.
public struct Stamp: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let hlc: String
    public let opID: String

    public init(hlc: String, opID: String) {
        self.hlc = hlc
        self.opID = opID
    }

    public init?(stored: String) {
        // By bytes: a pull reads three of these per record.
        guard let space = stored.utf8.lastIndex(of: UInt8(ascii: " ")) else { return nil }
        self.hlc = String(stored[..<space])
        self.opID = String(stored[stored.index(after: space)...])
    }

    public var description: String { hlc + " " + opID }

    public static func < (lhs: Stamp, rhs: Stamp) -> Bool {
        (lhs.hlc, lhs.opID) < (rhs.hlc, rhs.opID)
    }
}

extension HLCState {
    /// The HLC receive rule: client clocks within the skew bound are accepted and
    /// observed; ops without one get server stamps, in order; clocks too far ahead are
    /// marked `clock_skew` and neither observed nor applied.
    public mutating func stamp(_ ops: [Op], now: Int64, deviceID: String, maxSkew: Int64) -> [Op] {
        ops.map { op in
            var op = op
            if let text = op.hlc, let hlc = HLC(text) {
                if hlc.milliseconds > now + maxSkew {
                    op.rejected = RejectReason.clockSkew
                } else {
                    observe(hlc)
                }
            } else {
                op.hlc = next(now: now, node: deviceID).description
            }
            return op
        }
    }
}
