import Foundation
import SyncModels

/// Tokens whose signature has been checked, so that a client's next request with the same
/// token skips parsing it and checking the signature again (a device sends its token with
/// every push). Only the signature is remembered: the claims — expiry, not-before, issuer,
/// audience, user — are checked on every use, and a provider's token is taken again only
/// while the key that signed it is still in the provider's key set. Bounded: when full, it
/// starts over.
final class VerifiedTokens: Sendable {
    struct Entry: Sendable {
        let fields: [String: JSONValue]
        /// The provider key that signed it; nil for a token signed with `JWT_SECRET`.
        let providerKeyID: String?
    }

    private let entries = Locked<[String: Entry]>([:])
    let capacity: Int

    init(capacity: Int) {
        self.capacity = capacity
    }

    func entry(for token: String) -> Entry? {
        entries.withLock { $0[token] }
    }

    func remember(_ token: String, _ entry: Entry) {
        entries.withLock { entries in
            if entries.count >= capacity { entries.removeAll(keepingCapacity: true) }
            entries[token] = entry
        }
    }
}
