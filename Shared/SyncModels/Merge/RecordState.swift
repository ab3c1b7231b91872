/// The mergeable state of one record. Every component only grows — field
/// clocks, the floor, the newest write and the newest delete are maxima — so applying
/// the same set of ops in any order gives the same state (everyone converges).
public struct RecordState: Sendable, Equatable {
    /// Visible fields.
    public var fields: [String: JSONValue]
    /// The stamp of the newest set or removal of each field, for fields whose newest
    /// event is at or after `floor`. A removed field keeps its clock but has no value.
    public var fieldClocks: [String: Stamp]
    /// The newest upsert or delete: every field older than it is gone.
    public var floor: Stamp?
    /// The newest upsert or patch.
    public var writeClock: Stamp?
    /// The newest delete.
    public var deleteClock: Stamp?
    /// The newest publish or unpublish (last writer wins on visibility).
    public var visibility: Visibility?
    /// The newest fork into this record: the public id it copied.
    public var fork: Fork?
    /// Fields that increments, adds or removes reached after their last whole write: what
    /// each keeps to merge in any order (`fields` holds their visible values).
    public var merged: [String: MergedField]

    /// Whether the record is published, under which public id, listed or not, as of which stamp.
    public struct Visibility: Sendable, Equatable {
        public var publicID: String?
        public var canFork: Bool
        public var listed: Bool
        public var clock: Stamp

        public init(publicID: String?, canFork: Bool, listed: Bool = true, clock: Stamp) {
            self.publicID = publicID
            self.canFork = canFork
            self.listed = listed
            self.clock = clock
        }

        public var isPublic: Bool { publicID != nil }
    }

    /// The public record a fork copied, as of which stamp.
    public struct Fork: Sendable, Equatable {
        /// The source's public id; nil when the fork's readers could not have known it (an
        /// unlisted record of another space).
        public var publicID: String?
        public var clock: Stamp

        public init(publicID: String?, clock: Stamp) {
            self.publicID = publicID
            self.clock = clock
        }
    }

    public init(
        fields: [String: JSONValue] = [:], fieldClocks: [String: Stamp] = [:],
        floor: Stamp? = nil, writeClock: Stamp? = nil, deleteClock: Stamp? = nil, visibility: Visibility? = nil,
        fork: Fork? = nil, merged: [String: MergedField] = [:]
    ) {
        self.fields = fields
        self.fieldClocks = fieldClocks
        self.floor = floor
        self.writeClock = writeClock
        self.deleteClock = deleteClock
        self.visibility = visibility
        self.fork = fork
        self.merged = merged
    }

    /// A record is deleted when its newest delete is newer than every write to it.
    public var deleted: Bool {
        guard let deleteClock else { return false }
        guard let writeClock else { return true }
        return deleteClock > writeClock
    }

    /// Whether any op ever reached this record.
    public var exists: Bool { writeClock != nil || deleteClock != nil || visibility != nil }

    /// Whether pulls show the record: some write or delete reached it. A record that only
    /// a publish or unpublish reached holds nothing but its visibility clock.
    public var isShown: Bool { writeClock != nil || deleteClock != nil }

    /// Whether the record holds data: written and not deleted.
    public var hasData: Bool { writeClock != nil && !deleted }

    /// What readers see: a record is public or unlisted only while it holds data, so a
    /// publish that arrives before the record's creation, or a deleted record, shows nothing.
    public var publicVisibility: PublicVisibility {
        guard hasData, let visibility, visibility.isPublic else { return .private }
        return visibility.listed ? .public : .unlisted
    }

    /// The public id readers see (nil while private).
    public var shownPublicID: String? { publicVisibility == .private ? nil : visibility?.publicID }

    /// The newest stamp in the state: what a client's clock must observe (a fork is an
    /// upsert, so its stamp is never newer than `writeClock`).
    public var newestClock: Stamp? { [writeClock, deleteClock, visibility?.clock].compactMap { $0 }.max() }

    /// The data a pull shows: nil for a tombstone.
    public var visibleData: [String: JSONValue]? { deleted ? nil : fields }

    private func effectiveClock(of field: String) -> Stamp? {
        switch (fieldClocks[field], floor) {
        case (let clock?, let floor?): return max(clock, floor)
        case (let clock?, nil): return clock
        case (nil, let floor): return floor
        }
    }

    /// Raises the floor to `stamp`, dropping every field event older than it: a field
    /// last written before it is gone, though increments, adds and removes newer than it
    /// still count (on an absent base).
    private mutating func raiseFloor(to stamp: Stamp) {
        floor = stamp
        for (field, clock) in fieldClocks where clock < stamp {
            fieldClocks[field] = nil
            if merged[field] != nil { merged[field]?.base = nil } else { fields[field] = nil }
        }
        for field in merged.keys { settle(field, overruledThrough: stamp) }
    }

    /// Writes a field whole at `stamp` (nil removes it): what merged into it before is overruled.
    private mutating func write(_ field: String, _ value: JSONValue?, at stamp: Stamp) {
        fieldClocks[field] = stamp
        guard merged[field] != nil else {
            fields[field] = value
            return
        }
        merged[field]?.base = value
        settle(field, overruledThrough: stamp)
    }

    /// Drops what a whole write at `stamp` overrules from a merged field and shows what is
    /// left; a field with nothing left to merge becomes an ordinary one.
    private mutating func settle(_ field: String, overruledThrough stamp: Stamp) {
        guard var merge = merged[field] else { return }
        merge.overrule(through: stamp)
        if merge.isSettled {
            merged[field] = nil
            fields[field] = merge.base
        } else {
            merged[field] = merge
            fields[field] = merge.visible
        }
    }

    public mutating func upsert(_ document: [String: JSONValue], at stamp: Stamp) {
        writeClock = max(writeClock ?? stamp, stamp)
        if let floor, stamp < floor { return }
        for (field, value) in document where (fieldClocks[field].map { $0 < stamp } ?? true) {
            write(field, value, at: stamp)
        }
        raiseFloor(to: stamp)
    }

    /// `null` removes a field; any other value replaces it whole.
    public mutating func patch(_ changes: [String: JSONValue], at stamp: Stamp) {
        writeClock = max(writeClock ?? stamp, stamp)
        for (field, value) in changes where (effectiveClock(of: field).map { $0 < stamp } ?? true) {
            write(field, value.isNull ? nil : value, at: stamp)
        }
    }

    /// Adds `by` to a counter: counted when newer than the field's last whole write. An
    /// increment on a field that holds something other than a number (or a set) changes
    /// nothing: the server refuses it (`mergeRefusal`).
    public mutating func increment(_ field: String, by amount: JSONValue, at stamp: Stamp) {
        writeClock = max(writeClock ?? stamp, stamp)
        guard mergeRefusal(of: .increment, on: field, at: stamp) == nil, isNewerThanWholeWrite(field, stamp) else { return }
        var merge = merged[field] ?? MergedField(base: fields[field], kind: .counter(.init()))
        guard case .counter(var counter) = merge.kind else { return }
        counter.increments[stamp] = amount
        merge.kind = .counter(counter)
        merge.foldExcess()
        merged[field] = merge
        fields[field] = merge.visible
    }

    /// Adds (or removes) `values` to a set held in an array field: counted when newer than
    /// the field's last whole write; an element is present when its newest add is newer
    /// than its newest remove. On a field holding something other than an array (or a
    /// counter) it changes nothing: the server refuses it (`mergeRefusal`).
    public mutating func setMembers(_ field: String, adding: Bool, _ values: [JSONValue], at stamp: Stamp) {
        writeClock = max(writeClock ?? stamp, stamp)
        let type: OpType = adding ? .add : .remove
        guard mergeRefusal(of: type, on: field, at: stamp) == nil, isNewerThanWholeWrite(field, stamp) else { return }
        var merge = merged[field] ?? MergedField(base: fields[field], kind: .set(.init()))
        guard case .set(var set) = merge.kind else { return }
        for (position, value) in values.enumerated() {
            let key = MergedField.elementKey(value)
            if adding {
                // A value named twice in one op takes its last place.
                if set.added[key].map({ $0.stamp <= stamp }) ?? true {
                    set.added[key] = .init(value: value, stamp: stamp, position: position)
                }
            } else if set.removed[key].map({ $0 < stamp }) ?? true {
                set.removed[key] = stamp
            }
        }
        merge.kind = .set(set)
        merged[field] = merge
        fields[field] = merge.visible
    }

    private func isNewerThanWholeWrite(_ field: String, _ stamp: Stamp) -> Bool {
        effectiveClock(of: field).map { $0 < stamp } ?? true
    }

    /// Why the server refuses an increment, add or remove on `field` as the record stands:
    /// the field holds something else (text, or a set for an increment; a number or a
    /// counter for an add). Nil when it may apply, or when it is older than the field's
    /// last whole write (then it is merely superseded). Like `if_version`, this depends on
    /// what the op meets: a field should be a counter or a set from its first write on.
    public func mergeRefusal(of type: OpType, on field: String, at stamp: Stamp) -> String? {
        guard isNewerThanWholeWrite(field, stamp) else { return nil }
        let counting = type == .increment
        switch merged[field]?.kind {
        case .counter?: return counting ? (MergedField.countable(merged[field]?.base) ? nil : RejectReason.notANumber) : RejectReason.notASet
        case .set?: return counting ? RejectReason.notANumber : (MergedField.settable(merged[field]?.base) ? nil : RejectReason.notASet)
        case nil:
            if counting { return MergedField.countable(fields[field]) ? nil : RejectReason.notANumber }
            return MergedField.settable(fields[field]) ? nil : RejectReason.notASet
        }
    }

    public mutating func delete(at stamp: Stamp) {
        deleteClock = max(deleteClock ?? stamp, stamp)
        if let floor, stamp < floor { return }
        raiseFloor(to: stamp)
    }

    /// `publicID` publishes the record under that id; nil unpublishes it. The newest stamp wins.
    public mutating func setVisibility(publicID: String?, canFork: Bool, listed: Bool = true, at stamp: Stamp) {
        if let visibility, stamp < visibility.clock { return }
        let published = publicID != nil
        visibility = Visibility(publicID: publicID, canFork: published && canFork, listed: published && listed, clock: stamp)
    }

    /// Applies an op that needs nothing but itself (a fork needs its source's data: `fork`).
    public mutating func apply(_ op: Op) {
        switch op.type {
        case .upsert: upsert(op.data ?? [:], at: op.stamp)
        case .patch: patch(op.data ?? [:], at: op.stamp)
        case .delete: delete(at: op.stamp)
        case .publish: setVisibility(publicID: op.publicID, canFork: op.canFork ?? true, listed: op.listed ?? true, at: op.stamp)
        case .unpublish: setVisibility(publicID: nil, canFork: false, at: op.stamp)
        case .increment: increment(op.field ?? "", by: op.by ?? .int(0), at: op.stamp)
        case .add, .remove: setMembers(op.field ?? "", adding: op.type == .add, op.values ?? [], at: op.stamp)
        case .fork, .call: break
        }
    }

    /// Copies a public record's data as an upsert at `stamp` would, and records where it
    /// came from (the newest fork wins; nil: a source it must not name).
    public mutating func fork(_ document: [String: JSONValue], from publicID: String?, at stamp: Stamp) {
        upsert(document, at: stamp)
        if let fork, stamp < fork.clock { return }
        fork = Fork(publicID: publicID, clock: stamp)
    }

    /// True when `other` differs in anything that is visible or can still decide a later
    /// merge. The newest write alone never can once a newer delete exists, and otherwise
    /// it only moves together with a field clock or the floor.
    public func differsMeaningfully(from other: RecordState) -> Bool {
        fields != other.fields || fieldClocks != other.fieldClocks || floor != other.floor
            || deleteClock != other.deleteClock || deleted != other.deleted || visibility != other.visibility
            || fork != other.fork || merged != other.merged
    }

    public enum PublicVisibility: String, Sendable, Codable {
        case `private`, unlisted, `public`
    }
}
