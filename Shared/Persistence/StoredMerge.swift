import SyncModels

/// How a record's merged fields (counters and sets that increments, adds and removes
/// reached since their last whole write) are stored: the `merge_state` column, NULL for a
/// record with none (most records), else one object per field:
///
///     {"stock": {"base": 5, "inc": [["<stamp>", -1], …], "folded": [-40, "<stamp>"]},
///      "tags":  {"add": [["<stamp>", 0, "quick"], …], "rm": [["<stamp>", "slow"], …]}}
///
/// `base` is left out when the field has no whole write (absent); stamps are in their
/// stored form (`StoredStamp`). A counter keeps at most `MergedField.keptIncrements`
/// increments, so a hot counter's row stays a few kilobytes.
enum StoredMerge {
    static func text(_ merged: [String: MergedField]) -> String? {
        guard !merged.isEmpty else { return nil }
        return JSONWriter.string(.object(merged.mapValues(value)))
    }

    static func merged(_ text: String?) throws -> [String: MergedField] {
        guard let text else { return [:] }
        guard let fields = try JSONParser.parse(text).objectValue else { throw Malformed() }
        return try fields.mapValues(field)
    }

    struct Malformed: Error {}

    private static func value(_ field: MergedField) -> JSONValue {
        var object: [String: JSONValue] = [:]
        if let base = field.base { object["base"] = base }
        switch field.kind {
        case .counter(let counter):
            object["inc"] = .array(counter.increments.sorted { $0.key < $1.key }.map { .array([.string(StoredStamp.text($0.key)), $0.value]) })
            if let folded = counter.folded { object["folded"] = .array([folded.sum, .string(StoredStamp.text(folded.through))]) }
        case .set(let set):
            object["add"] = .array(set.added.values.sorted { $0.stamp < $1.stamp }.map {
                .array([.string(StoredStamp.text($0.stamp)), .int(Int64($0.position)), $0.value])
            })
            object["rm"] = .array(set.removed.sorted { $0.key < $1.key }.map { key, stamp in
                .array([.string(StoredStamp.text(stamp)), (try? JSONParser.parse(key)) ?? .null])
            })
        }
        return .object(object)
    }

    private static func field(_ value: JSONValue) throws -> MergedField {
        guard let object = value.objectValue else { throw Malformed() }
        let base = object["base"]
        if let increments = object["inc"]?.arrayValue {
            var counter = MergedField.Counter()
            for entry in increments {
                guard let pair = entry.arrayValue, pair.count == 2, let stamp = pair[0].stringValue.flatMap(StoredStamp.stamp) else {
                    throw Malformed()
                }
                counter.increments[stamp] = pair[1]
            }
            if let folded = object["folded"]?.arrayValue {
                guard folded.count == 2, let through = folded[1].stringValue.flatMap(StoredStamp.stamp) else { throw Malformed() }
                counter.folded = .init(sum: folded[0], through: through)
            }
            return MergedField(base: base, kind: .counter(counter))
        }
        var set = MergedField.AddWinsSet()
        for entry in object["add"]?.arrayValue ?? [] {
            guard let triple = entry.arrayValue, triple.count == 3, let stamp = triple[0].stringValue.flatMap(StoredStamp.stamp),
                  let position = triple[1].intValue
            else { throw Malformed() }
            set.added[MergedField.elementKey(triple[2])] = .init(value: triple[2], stamp: stamp, position: Int(position))
        }
        for entry in object["rm"]?.arrayValue ?? [] {
            guard let pair = entry.arrayValue, pair.count == 2, let stamp = pair[0].stringValue.flatMap(StoredStamp.stamp) else {
                throw Malformed()
            }
            set.removed[MergedField.elementKey(pair[1])] = stamp
        }
        return MergedField(base: base, kind: .set(set))
    }
}
