import Foundation

/// The two forms a pull page takes. `full` spells every field of every record; `compact`
/// (asked for with `form=compact`) carries what a device uses and no more:
///
/// - `deleted` only on tombstones (`true`), `data` only on records that are not;
/// - `visibility`, `public_id`, `can_fork` and `published_at` only while the record is
///   published, `forked_from` only when it was forked;
/// - no `updated_at` and `updated_by`: the time and device of the newest write are in `hlc`;
/// - `hlc` ends in the index of its device in the page's `devices` instead of the device
///   itself (`1764237600000-00000-0` with `"devices":["6f1c…"]`), so a page names each
///   writing device once.
public enum PullForm: String, Sendable, CaseIterable {
    case full, compact
}

/// A pull page read from its JSON, in either form.
public struct PullPage: Sendable, Equatable {
    public var changes: [RecordView]
    public var cursor: String
    public var hasMore: Bool

    public init(changes: [RecordView], cursor: String, hasMore: Bool) {
        self.changes = changes
        self.cursor = cursor
        self.hasMore = hasMore
    }

    /// Nil when `json` is no page: a record without its keys, or a compact clock naming a
    /// device the page does not list.
    public init?(json: JSONValue) {
        guard let page = json.objectValue, case .array(let items)? = page["changes"],
              let cursor = page["cursor"]?.stringValue, let hasMore = page["has_more"]?.boolValue
        else { return nil }
        var devices: [String]?
        if let listed = page[Self.devices] {
            guard case .array(let names) = listed else { return nil }
            devices = names.compactMap(\.stringValue)
            guard devices?.count == names.count else { return nil }
        }
        var changes: [RecordView] = []
        changes.reserveCapacity(items.count)
        for item in items {
            guard var record = RecordView(json: item) else { return nil }
            if let devices, let hlc = record.hlc {
                guard let expanded = Self.expand(hlc, devices: devices) else { return nil }
                record.hlc = expanded
            }
            changes.append(record)
        }
        self.init(changes: changes, cursor: cursor, hasMore: hasMore)
    }

    /// The page in `form`, as the gateway writes it (the fake servers answer with this).
    public func json(_ form: PullForm) -> JSONValue {
        var page: [String: JSONValue] = ["cursor": .string(cursor), "has_more": .bool(hasMore)]
        switch form {
        case .full:
            // Every field, as RecordView's Codable form spells it.
            page["changes"] = .array(changes.map { (try? JSONParser.parse(JSONCoding.encode($0))) ?? .null })
        case .compact:
            var devices: [String: Int] = [:]
            var order: [String] = []
            page["changes"] = .array(changes.map { record in
                record.compactJSON { node in
                    if let index = devices[node] { return index }
                    devices[node] = order.count
                    order.append(node)
                    return order.count - 1
                }
            })
            page[Self.devices] = .array(order.map(JSONValue.string))
        }
        return .object(page)
    }

    /// The key of a compact page's devices.
    public static let devices = "devices"

    /// A compact clock's text with its device in place of its index; nil when it ends in
    /// no index of `devices`.
    public static func expand(_ hlc: String, devices: [String]) -> String? {
        guard hlc.utf8.count > HLC.nodeOffset, let index = Int(String(hlc.dropFirst(HLC.nodeOffset))),
              devices.indices.contains(index)
        else { return nil }
        return String(hlc.prefix(HLC.nodeOffset)) + devices[index]
    }
}

extension RecordView {
    /// The record as a compact page carries it; `index` numbers a clock's device in the page.
    func compactJSON(index: (String) -> Int) -> JSONValue {
        var fields: [String: JSONValue] = [
            Key.collection.rawValue: .string(collection), Key.id.rawValue: .string(id), Key.version.rawValue: .int(version),
        ]
        if deleted { fields[Key.deleted.rawValue] = .bool(true) } else { fields[Key.data.rawValue] = .object(data ?? [:]) }
        if let hlc, let clock = HLC(hlc) {
            fields[Key.hlc.rawValue] = .string(String(hlc.prefix(HLC.nodeOffset)) + String(index(clock.node)))
        }
        if visibility != .private {
            fields[Key.visibility.rawValue] = .string(visibility.rawValue)
            fields[Key.publicID.rawValue] = publicID.map(JSONValue.string) ?? .null
            fields[Key.canFork.rawValue] = .bool(canFork)
            fields[Key.publishedAt.rawValue] = publishedAt.map(JSONValue.string) ?? .null
        }
        if let forkedFrom { fields[Key.forkedFrom.rawValue] = .string(forkedFrom) }
        return .object(fields)
    }

    private typealias Key = CodingKeys
}
