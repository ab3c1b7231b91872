import Foundation
import Hummingbird

extension Request {
    /// Whether `If-None-Match` names `etag`, or is `*`. Tags are compared weakly, as RFC 9110
    /// asks for this header: `W/"x"` and `"x"` match each other.
    public func ifNoneMatch(_ etag: String) -> Bool {
        guard let header = headers[.ifNoneMatch] else { return false }
        func opaque(_ tag: String) -> String {
            let trimmed = tag.trimmingCharacters(in: .whitespaces)
            return trimmed.hasPrefix("W/") ? String(trimmed.dropFirst(2)) : trimmed
        }
        let wanted = opaque(etag)
        return header.split(separator: ",").map { opaque(String($0)) }.contains { $0 == wanted || $0 == "*" }
    }
}
