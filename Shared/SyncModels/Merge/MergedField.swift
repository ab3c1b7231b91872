/// A field that increments, adds or removes reached after its last whole write (an upsert,
/// a patch, or the floor of an upsert or delete that left it out): what it keeps so that
/// those ops commute with each other and with whole writes. A field no such op reached
/// since its last whole write keeps nothing here: it is an ordinary field.
///
/// The field's visible value (`RecordState.fields`) is computed from `base` and the ops
/// kept: a counter shows its base (0 when absent or null) plus every increment; a set
/// shows its base's elements that no newer remove took out, then the elements added since,
/// in the order they were added. Whole writes are judged by the field's clock as ever; what
/// is kept here is only ever newer than that clock.
public struct MergedField: Sendable, Equatable {
    /// The field's last whole write: nil when it has none newer than the record's floor
    /// (absent), else the value written (`null` is a value an upsert stores).
    public var base: JSONValue?
    public var kind: Kind

    public enum Kind: Sendable, Equatable {
        case counter(Counter)
        case set(AddWinsSet)
    }

    public init(base: JSONValue?, kind: Kind) {
        self.base = base
        self.kind = kind
    }

    /// Increments newer than the base, each by its op's stamp. At most `keptIncrements` are
    /// kept one by one; older ones are folded into `folded`, which counts as one increment at
    /// the newest stamp folded (so a whole write older than that stamp, arriving late,
    /// keeps the folded sum: the one place a counter is not exact, and only for a whole
    /// write that arrives after `keptIncrements` newer increments).
    public struct Counter: Sendable, Equatable {
        public var increments: [Stamp: JSONValue]
        public var folded: Folded?

        public init(increments: [Stamp: JSONValue] = [:], folded: Folded? = nil) {
            self.increments = increments
            self.folded = folded
        }

        public struct Folded: Sendable, Equatable {
            public var sum: JSONValue
            public var through: Stamp

            public init(sum: JSONValue, through: Stamp) {
                self.sum = sum
                self.through = through
            }
        }
    }

    /// Adds and removes newer than the base, per element (by its canonical JSON): the
    /// newest add and the newest remove of each. An element is present when its newest add
    /// is newer than its newest remove, or when the base holds it and no remove reached it.
    /// Its place: the base's if no add or remove reached it, else that of its newest add.
    public struct AddWinsSet: Sendable, Equatable {
        public var added: [String: Added]
        public var removed: [String: Stamp]

        public init(added: [String: Added] = [:], removed: [String: Stamp] = [:]) {
            self.added = added
            self.removed = removed
        }

        /// An element's newest add: its value, the op's stamp and its place among the op's values.
        public struct Added: Sendable, Equatable {
            public var value: JSONValue
            public var stamp: Stamp
            public var position: Int

            public init(value: JSONValue, stamp: Stamp, position: Int) {
                self.value = value
                self.stamp = stamp
                self.position = position
            }
        }
    }

    /// How many increments a counter keeps one by one: enough that a whole write arriving
    /// behind that many newer increments is still exact, few enough that a hot counter's
    /// row stays small (each kept increment stores a stamp).
    public static let keptIncrements = 32

    /// Nothing newer than the base is kept: the field is an ordinary one again.
    public var isSettled: Bool {
        switch kind {
        case .counter(let counter): return counter.increments.isEmpty && counter.folded == nil
        case .set(let set): return set.added.isEmpty && set.removed.isEmpty
        }
    }

    /// The field as readers see it; nil: absent.
    public var visible: JSONValue? {
        switch kind {
        case .counter(let counter):
            guard let start = Self.counterStart(base) else { return base }
            var total = start
            if let folded = counter.folded { total = Self.sum(total, folded.sum) }
            for stamp in counter.increments.keys.sorted() { total = Self.sum(total, counter.increments[stamp]!) }
            return total
        case .set(let set):
            // Nothing added to an absent or null field: removes leave it as it is.
            if set.added.isEmpty, base == nil || base == .null { return base }
            guard let items = base == nil || base == .null ? [] : base?.arrayValue else { return base }
            // The base's elements that no add or remove reached keep their places; the
            // others follow in the order of their newest add, as if each add had moved its
            // elements to the end.
            let untouched = items.filter {
                let key = Self.elementKey($0)
                return set.added[key] == nil && set.removed[key] == nil
            }
            let added = set.added.values.filter { added in
                set.removed[Self.elementKey(added.value)].map { $0 < added.stamp } ?? true
            }.sorted { ($0.stamp, $0.position) < ($1.stamp, $1.position) }
            return .array(untouched + added.map(\.value))
        }
    }

    /// Drops what a whole write at `stamp` overrules: every op no newer than it (a fold
    /// counts as at its newest stamp).
    public mutating func overrule(through stamp: Stamp) {
        switch kind {
        case .counter(var counter):
            counter.increments = counter.increments.filter { $0.key > stamp }
            if let folded = counter.folded, folded.through <= stamp { counter.folded = nil }
            kind = .counter(counter)
        case .set(var set):
            set.added = set.added.filter { $0.value.stamp > stamp }
            set.removed = set.removed.filter { $0.value > stamp }
            kind = .set(set)
        }
    }

    /// Folds the oldest increments into one when more than `keptIncrements` are kept.
    mutating func foldExcess() {
        guard case .counter(var counter) = kind, counter.increments.count > Self.keptIncrements else { return }
        let oldest = counter.increments.keys.sorted().prefix(counter.increments.count - Self.keptIncrements)
        fold(oldest, of: &counter)
        kind = .counter(counter)
    }

    /// Folds the increments at `stamps` (sorted) into the counter's fold, oldest first.
    private func fold(_ stamps: some Collection<Stamp>, of counter: inout Counter) {
        guard let newest = stamps.max() else { return }
        var sum = counter.folded?.sum ?? .int(0)
        for stamp in stamps { sum = Self.sum(sum, counter.increments.removeValue(forKey: stamp)!) }
        counter.folded = Counter.Folded(sum: sum, through: max(newest, counter.folded?.through ?? newest))
    }

    /// A counter's value before its increments: its base when that is a number, 0 when
    /// absent or null; nil when the base is something else (the field then shows its base).
    static func counterStart(_ base: JSONValue?) -> JSONValue? {
        switch base {
        case nil, .null?: return .int(0)
        case .int?, .double?: return base
        default: return nil
        }
    }

    /// Whether a counter may stand on `value` (the field's value now): a number, null or absent.
    public static func countable(_ value: JSONValue?) -> Bool { counterStart(value) != nil }

    /// Whether a set may stand on `value`: an array, null or absent.
    public static func settable(_ value: JSONValue?) -> Bool {
        value == nil || value == .null || value?.arrayValue != nil
    }

    /// Two numbers added: integers stay exact while they fit in 64 bits; any fraction, or
    /// an overflow, gives a double (an integral double within 9e15 reads back as an integer).
    /// A counter stays within a double's range: past it, at its bound (JSON has no infinity).
    public static func sum(_ a: JSONValue, _ b: JSONValue) -> JSONValue {
        if case .int(let x) = a, case .int(let y) = b {
            let (total, overflow) = x.addingReportingOverflow(y)
            if !overflow { return .int(total) }
        }
        var total = (a.numberValue ?? 0) + (b.numberValue ?? 0)
        if !total.isFinite { total = total > 0 ? .greatestFiniteMagnitude : -.greatestFiniteMagnitude }
        if total.rounded() == total, abs(total) < 9.0e15 { return .int(Int64(total)) }
        return .double(total)
    }

    /// The identity of a set's element: its compact JSON with sorted keys.
    public static func elementKey(_ value: JSONValue) -> String { JSONWriter.string(value) }
}

extension JSONValue {
    /// The value as a double, when it is a number.
    public var numberValue: Double? {
        switch self {
        case .int(let value): return Double(value)
        case .double(let value): return value
        default: return nil
        }
    }
}

extension RecordState {
    /// Settles what increments, adds and removes older than `horizon` left: each merged
    /// field's ops older than it become part of its whole write, at the newest such op's
    /// stamp, and a field with nothing newer becomes an ordinary one. What readers see does
    /// not change. Purge runs this past the job retention (when the op ids that make a
    /// retried op a duplicate are forgotten too): an op older than the new whole write that
    /// arrives later is superseded, as any op older than a whole write is. A counter whose
    /// sum would round differently (fractions) is left as it is. Returns whether anything changed.
    public mutating func settleMerged(before horizon: Stamp) -> Bool {
        var changed = false
        for (name, field) in merged {
            guard let (settled, clock) = field.settled(before: horizon), settled.visible == fields[name] else { continue }
            fieldClocks[name] = clock
            merged[name] = settled.isSettled ? nil : settled
            changed = true
        }
        return changed
    }
}

extension MergedField {
    /// The field with its ops older than `horizon` folded into its base, and the base's new
    /// clock (the newest op folded); nil when none is that old, or the base is of another kind.
    func settled(before horizon: Stamp) -> (MergedField, Stamp)? {
        var field = self
        switch kind {
        case .counter(var counter):
            guard var total = Self.counterStart(base) else { return nil }
            let old = counter.increments.keys.filter { $0 < horizon }.sorted()
            var newest = old.last
            if let folded = counter.folded, folded.through < horizon {
                total = Self.sum(total, folded.sum)
                newest = max(newest ?? folded.through, folded.through)
                counter.folded = nil
            }
            guard let newest else { return nil }
            for stamp in old { total = Self.sum(total, counter.increments.removeValue(forKey: stamp)!) }
            field.base = total
            field.kind = .counter(counter)
            return (field, newest)
        case .set(let set):
            guard Self.settable(base) else { return nil }
            var older = MergedField(base: base, kind: .set(.init(
                added: set.added.filter { $0.value.stamp < horizon }, removed: set.removed.filter { $0.value < horizon })))
            guard case .set(let folded) = older.kind,
                  let newest = (folded.added.values.map(\.stamp) + folded.removed.values).max()
            else { return nil }
            older.base = older.visible
            field.base = older.base
            field.kind = .set(.init(added: set.added.filter { $0.value.stamp >= horizon }, removed: set.removed.filter { $0.value >= horizon }))
            return (field, newest)
        }
    }
}
