import Foundation
import Logging
import Metrics
import Persistence

/// Removes objects that are garbage — deleted files nothing else points at, abandoned
/// uploads — from their store, then forgets them. Removing is idempotent: a sweep that
/// stops halfway is finished by the next.
public struct BlobSweeper: Sendable {
    let catalog: BlobCatalog
    let stores: BlobStores
    let logger: Logger
    private let removed = Counter(label: "syncline_blob_objects_removed_total")

    public init(catalog: BlobCatalog, stores: BlobStores, logger: Logger) {
        self.catalog = catalog
        self.stores = stores
        self.logger = logger
    }

    /// Ends expired uploads and removes every object due; returns how many it removed.
    @discardableResult
    public func sweep(batch: Int = 200) async throws -> Int {
        _ = try await catalog.expireUploads()
        let kinds = BlobStoreKind.allCases.filter { stores.store($0) != nil }.map(\.rawValue)
        var total = 0
        while true {
            let due = try await catalog.dueGarbage(stores: kinds, limit: batch)
            for item in due {
                guard let kind = BlobStoreKind(rawValue: item.store), let store = stores.store(kind) else { continue }
                try await store.remove(object: item.object, sha256: item.sha256)
                try await catalog.forgetGarbage(item.object)
                total += 1
                removed.increment()
            }
            if due.count < batch { break }
        }
        if total > 0 { logger.info("removed blob objects", metadata: ["blob.objects": "\(total)"]) }
        return total
    }
}
