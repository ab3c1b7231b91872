import Foundation
import SyncModels

/// Pull pages in both forms: a client reads the compact form (what it asks for) and the
/// full form (what a server of the release before answers) as the same records, less
/// `updated_at` and `updated_by`, which the compact form does not carry.
extension ConformanceVectors {
    static let deviceA = "6f1c2a4e-0b1d-4c3e-9f00-00000000000a"
    static let deviceB = "6f1c2a4e-0b1d-4c3e-9f00-00000000000b"

    static func pulled(
        _ id: String, version: Int64, deleted: Bool = false, data: [String: JSONValue]? = ["title": "a"], at ms: Int64,
        by device: String = deviceA, hlcDevice: String? = nil, visibility: RecordState.PublicVisibility = .private,
        publicID: String? = nil, canFork: Bool = false, publishedAt: String? = nil, forkedFrom: String? = nil
    ) -> RecordView {
        RecordView(
            collection: "todos", id: id, version: version, deleted: deleted, data: deleted ? nil : data,
            updatedAt: "2026-11-22T10:00:00.123456Z", updatedBy: device, hlc: hlc(ms, node: hlcDevice ?? device),
            visibility: visibility, publicID: publicID, canFork: canFork, publishedAt: publishedAt, forkedFrom: forkedFrom)
    }

    static let pullCases: [(name: String, page: PullPage)] = [
        ("records of one device", PullPage(
            changes: [pulled("t1", version: 1, at: 10), pulled("t2", version: 2, data: ["title": "b", "n": 2.5, "tags": ["x"]], at: 11)],
            cursor: "2", hasMore: false)),
        ("two devices, a tombstone, a clock of another device than the last write's", PullPage(
            changes: [
                pulled("t1", version: 3, at: 10), pulled("t2", version: 4, deleted: true, at: 12, by: deviceB),
                pulled("t3", version: 5, at: 13, hlcDevice: deviceB), pulled("t4", version: 6, at: 14),
            ],
            cursor: "6", hasMore: true)),
        ("a published record, an unlisted one and a fork", PullPage(
            changes: [
                pulled("t1", version: 7, at: 20, visibility: .public, publicID: "anchor-watch", canFork: true,
                       publishedAt: "2026-11-22T10:00:00.500000Z"),
                pulled("t2", version: 8, at: 21, visibility: .unlisted, publicID: "night-list", publishedAt: "2026-11-22T11:00:00.000000Z"),
                pulled("t3", version: 9, data: ["title": "copy"], at: 22, by: deviceB, forkedFrom: "anchor-watch"),
            ],
            cursor: "9", hasMore: false)),
        ("data that looks like the page's keys, and text to escape", PullPage(
            changes: [pulled("t\"1", version: 10, data: ["deleted": true, "hlc": "x", "devices": ["0"], "t": "a\u{1}\n\u{e9}"], at: 30)],
            cursor: "10", hasMore: false)),
        ("an empty last page", PullPage(changes: [], cursor: "10", hasMore: false)),
    ]

    static var pullVectors: JSONValue {
        .array(pullCases.map { pull in
            ["name": .string(pull.name), "full": pull.page.json(.full), "compact": pull.page.json(.compact)]
        })
    }

    /// What a device holds from a page: its records without `updated_at` and `updated_by`.
    static func held(_ page: PullPage) -> PullPage {
        var page = page
        for index in page.changes.indices {
            page.changes[index].updatedAt = nil
            page.changes[index].updatedBy = nil
        }
        return page
    }
}
