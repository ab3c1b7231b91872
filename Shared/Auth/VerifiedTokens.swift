import Foundation
import SyncModels

/// Tokens whose signature has been checked, so that a client's next request with the same
/// token skips parsing it and checking the signature again (a device sends its token with
/// every push). Only the signature is remembered: the claims — expiry, not-before, issuer,
/// audience, user — are checked on every use, and a provider's token is taken again only
/// while the key that signed it is still in the provider's key set. Bounded: when full, it
/// starts over.
final class VerifiedTokens: @unchecked Sendable {
    // @unchecked: `entries` is only touched under `lock`.
    struct Entry {
        let fields: [String: JSONValue]
        /// The provider key that signed it; nil for a token signed with `JWT_SECRET`.
        let providerKeyID: String?
    }

    private let lock = NSLock()
    private var entries: [String: Entry] = [:]
    let capacity: Int

    init(capacity: Int) {
        self.capacity = capacity
    }

    func entry(for token: String) -> Entry? {
        lock.withLock { entries[token] }
    }

    func remember(_ token: String, _ entry: Entry) {
        lock.withLock {
            if entries.count >= capacity { entries.removeAll(keepingCapacity: true) }
            entries[token] = entry
        }
    }
}
