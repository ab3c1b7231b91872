import Foundation

/// A `Range` request header (RFC 9110 §14) against a body of `size` bytes. One range is
/// served; a header asking for several, or that cannot be read, is ignored (the whole
/// body is sent), as the RFC allows.
public enum ByteRangeRequest: Equatable, Sendable {
    case whole
    case part(Range<Int64>)
    /// No byte of the body is in the range: 416.
    case unsatisfiable

    public init(header: String?, size: Int64) {
        guard let header, header.hasPrefix("bytes="), !header.contains(",") else {
            self = .whole
            return
        }
        let spec = header.dropFirst("bytes=".count).trimmingCharacters(in: .whitespaces)
        let bounds = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard bounds.count == 2, bounds.allSatisfy({ $0.utf8.allSatisfy { (48...57).contains($0) } && $0.utf8.count <= 18 }) else {
            self = .whole
            return
        }
        switch (Int64(bounds[0]), Int64(bounds[1])) {
        case (let first?, let last?):
            guard first <= last else { self = .whole; return }
            self = first < size ? .part(first..<min(last + 1, size)) : .unsatisfiable
        case (let first?, nil):
            self = first < size ? .part(first..<size) : .unsatisfiable
        case (nil, let suffix?):
            self = suffix > 0 && size > 0 ? .part(max(0, size - suffix)..<size) : .unsatisfiable
        case (nil, nil):
            self = .whole
        }
    }
}
