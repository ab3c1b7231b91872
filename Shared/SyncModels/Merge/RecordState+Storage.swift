/// How a record's field clocks are stored: most fields were last set by the record's
/// newest write (an upsert sets every field at its stamp), so those are left out and
/// restored from `writeClock`. A field stored with its clock is one whose clock differs,
/// or a removed field (no value). A stored stamp is about 93 bytes, so leaving them out
/// is most of what a record's row weighs.
extension RecordState {
    /// The field clocks to store: those that `restoringFieldClocks` cannot restore.
    public var storedFieldClocks: [String: Stamp] {
        guard let writeClock else { return fieldClocks }
        return fieldClocks.filter { field, clock in clock != writeClock || fields[field] == nil }
    }

    /// Every field clock, from the stored ones: each field holding a value without a
    /// stored clock was set at `writeClock`. (Rows stored with every clock read the same.)
    /// A merged field is never last set by the newest write (the increments, adds or
    /// removes it keeps are newer than its whole write), so its clock is always stored: one
    /// without is a field with no whole write since the floor.
    public static func restoringFieldClocks(
        _ stored: [String: Stamp], fields: [String: JSONValue], writeClock: Stamp?, merged: [String: MergedField] = [:]
    ) -> [String: Stamp] {
        guard let writeClock else { return stored }
        var clocks = stored
        for field in fields.keys where clocks[field] == nil && merged[field] == nil { clocks[field] = writeClock }
        return clocks
    }
}
