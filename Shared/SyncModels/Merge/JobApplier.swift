public struct RecordKey: Sendable, Hashable, Comparable {
    public let collection: String
    public let id: String

    public init(collection: String, id: String) {
        self.collection = collection
        self.id = id
    }

    public static func < (lhs: RecordKey, rhs: RecordKey) -> Bool {
        (lhs.collection, lhs.id) < (rhs.collection, rhs.id)
    }
}

/// A record as persisted: its mergeable state plus the version of its last change.
public struct StoredRecord: Sendable, Equatable {
    public var key: RecordKey
    public var version: Int64
    public var state: RecordState
    public var updatedBy: String?
    /// When readers first saw it published under its public id (kept by the database).
    public var publishedAt: String?
    /// The user whose op first gave it data: its `author` in the rules. Nil for a record
    /// with no data yet, and for records written before authors were kept.
    public var creator: UserID?

    public init(
        key: RecordKey, version: Int64, state: RecordState, updatedBy: String? = nil, publishedAt: String? = nil,
        creator: UserID? = nil
    ) {
        self.key = key
        self.version = version
        self.state = state
        self.updatedBy = updatedBy
        self.publishedAt = publishedAt
        self.creator = creator
    }

    public var view: RecordView {
        let visibility = state.publicVisibility
        return RecordView(
            collection: key.collection, id: key.id, version: version,
            deleted: state.deleted, data: state.visibleData, updatedBy: updatedBy, hlc: state.newestClock?.hlc,
            visibility: visibility, publicID: state.shownPublicID,
            canFork: visibility != .private && state.visibility?.canFork == true,
            publishedAt: visibility == .private ? nil : publishedAt, forkedFrom: state.fork?.publicID)
    }
}

/// What a fork op finds under its public id when its job is applied.
public enum ForkSource: Sendable, Equatable {
    /// A record of the forking user, to be loaded with the job's records: the applier reads
    /// it as this job has left it.
    case own(RecordKey)
    /// A record of another space that readers can see: public (`listed`) or unlisted.
    case other(space: SpaceID, key: RecordKey, data: [String: JSONValue], canFork: Bool, listed: Bool)
}

/// A record forked by a job, for counting forks once per forking user.
public struct ForkedRecord: Sendable, Hashable {
    /// The source's space; nil: the job's own space.
    public let space: SpaceID?
    public let key: RecordKey

    public init(space: SpaceID?, key: RecordKey) {
        self.space = space
        self.key = key
    }
}

/// Who pushed a job, as the rules judge its ops: the rules current when it is applied, the
/// pusher and their role in the space.
public struct RulesJudge: Sendable {
    public let rules: Rules
    public let user: UserID
    public let role: SpaceRole

    public init(rules: Rules, user: UserID, role: SpaceRole) {
        self.rules = rules
        self.user = user
        self.role = role
    }
}

/// Applies the ops of one job to the records they touch: the pure heart of the worker.
/// The caller loads the touched records and the op_ids already remembered in the job's
/// space, holds that space's counter lock, and persists the outcome in the same transaction.
public struct JobApplier {
    public struct Outcome: Sendable {
        public var results: [OpResult]
        /// Records whose state changed, with their new versions.
        public var changed: [RecordKey: StoredRecord]
        /// Every record given, as this job left it (the next job of a batch reads these).
        public var records: [RecordKey: StoredRecord]
        /// op_ids to remember (every op whose result was not `rejected`).
        public var remembered: [String]
        /// The space's change counter after this job.
        public var counter: Int64
        /// Records this job forked (fork ops that were not rejected, duplicate or conflicting).
        public var forked: Set<ForkedRecord>
    }

    /// `publicIDOwners`: for each public id a publish op of this job names, the record of
    /// this space that holds it, or nil when a record of another space holds it (absent: free).
    /// `purgeClock`: the newest delete among this space's purged tombstones; an op no newer
    /// than it, on a record that does not exist, is refused as `stale` — it might be the
    /// re-push of a write that a purged delete had overruled.
    /// `forkSources`: for each public id a fork op of this job names, where it is (absent:
    /// no readable record has it); own sources must be among `records` when they exist.
    public static func apply(
        ops: [Op], records: consuming [RecordKey: StoredRecord], knownOpIDs: Set<String>, counter: Int64,
        deviceID: String?, publicIDOwners: [String: RecordKey?] = [:], purgeClock: Stamp? = nil,
        forkSources: [String: ForkSource] = [:], judge: RulesJudge? = nil, hookVerdicts: [String: HookExchange.Verdict] = [:]
    ) -> Outcome {
        var run = Run(
            owners: publicIDOwners, records: records, known: knownOpIDs, counter: counter, deviceID: deviceID,
            purgeClock: purgeClock, forkSources: forkSources, judge: judge, hookVerdicts: hookVerdicts)
        run.results.reserveCapacity(ops.count)
        for op in ops { run.apply(op) }
        return Outcome(
            results: run.results, changed: run.changed, records: run.records, remembered: run.remembered,
            counter: run.counter, forked: run.forked)
    }

    /// One job's ops applied one after the other, each seeing what the ones before it left.
    private struct Run {
        var owners: [String: RecordKey?]
        var records: [RecordKey: StoredRecord]
        var known: Set<String>
        var counter: Int64
        let deviceID: String?
        let purgeClock: Stamp?
        let forkSources: [String: ForkSource]
        /// The rules and the pusher (who becomes the author of the records they create).
        let judge: RulesJudge?
        /// What the hooks answered each call, their ops' ids and clocks given.
        let hookVerdicts: [String: HookExchange.Verdict]
        var changed: [RecordKey: StoredRecord] = [:]
        var remembered: [String] = []
        var results: [OpResult] = []
        var forked = Set<ForkedRecord>()

        /// What an op comes to before its record is read: its result, when that is already
        /// decided, or (for a fork) the source it copies.
        enum Screening {
            case decided(OpResult)
            case admitted(copying: Copied?)
        }

        mutating func apply(_ op: Op) {
            results.append(outcome(of: op, judged: true))
        }

        /// Applies one op; `judged`: whether the rules judge it (a hook's ops are the
        /// backend's word, not a member's).
        mutating func outcome(of op: Op, judged: Bool) -> OpResult {
            let key = RecordKey(collection: op.collection, id: op.id)
            let copied: Copied?
            switch screen(op, key: key) {
            case .decided(let result):
                return result
            case .admitted(let copying):
                copied = copying
            }
            if judged, let judge, judge.rules.refusesAnything || op.type == .call, let refusal = judge.rules.judge(
                op, record: records[key], role: judge.role, user: judge.user, copied: copied?.document) {
                return OpResult(opID: op.opID, status: .rejected, reason: RejectReason.rule, rule: refusal.rule)
            }
            if op.type == .call { return call(op) }
            if let field = op.field, let reason = records[key]?.state.mergeRefusal(of: op.type, on: field, at: op.stamp) {
                return OpResult(opID: op.opID, status: .rejected, reason: reason)
            }
            known.insert(op.opID)
            remembered.append(op.opID)

            var record = records[key] ?? StoredRecord(key: key, version: 0, state: RecordState())
            if let expected = op.ifVersion {
                let current: Int64 = (record.state.exists && !record.state.deleted) ? record.version : 0
                if current != expected {
                    let view: RecordView? = record.state.exists ? record.view : nil
                    return OpResult(opID: op.opID, status: .conflict, version: current, current: view)
                }
            }
            let result = write(op, copying: copied, to: &record)
            records[key] = record
            return result
        }

        /// A call: what its hook answered, applied. Its ops each take effect once (their
        /// ids derive from the call's); the call is `applied` with the last version any of
        /// them took, or `superseded` when none changed anything.
        mutating func call(_ op: Op) -> OpResult {
            switch hookVerdicts[op.opID] {
            case nil:
                return OpResult(opID: op.opID, status: .rejected, reason: RejectReason.hook("unanswered"))
            case .reject(let reason)?:
                return OpResult(opID: op.opID, status: .rejected, reason: RejectReason.hook(reason))
            case .ops(let answered)?:
                known.insert(op.opID)
                remembered.append(op.opID)
                var version: Int64?
                for derived in answered {
                    let result = outcome(of: derived, judged: false)
                    if result.status == .applied { version = result.version }
                }
                return version.map { OpResult(opID: op.opID, status: .applied, version: $0) }
                    ?? OpResult(opID: op.opID, status: .superseded)
            }
        }

        /// Refused (missing clock, stale after a purge, public id taken, fork source
        /// unreadable), a duplicate, or admitted.
        func screen(_ op: Op, key: RecordKey) -> Screening {
            if let reason = op.rejected ?? JobApplier.rejection(of: op) {
                return .decided(OpResult(opID: op.opID, status: .rejected, reason: reason))
            }
            if known.contains(op.opID) { return .decided(OpResult(opID: op.opID, status: .duplicate)) }
            if let purgeClock, records[key] == nil, op.stamp <= purgeClock {
                return .decided(OpResult(opID: op.opID, status: .rejected, reason: RejectReason.stale))
            }
            if op.type == .publish, let publicID = op.publicID, let owner = owners[publicID], owner != key {
                // Held by another record (of this user, or of someone else when nil).
                return .decided(OpResult(opID: op.opID, status: .rejected, reason: RejectReason.publicIDTaken))
            }
            guard op.type == .fork else { return .admitted(copying: nil) }
            switch JobApplier.forkable(op.publicID ?? "", in: forkSources, records: records) {
            case .failure(let refusal): return .decided(OpResult(opID: op.opID, status: .rejected, reason: refusal.reason))
            case .success(let found): return .admitted(copying: found)
            }
        }

        /// Merges the op (or the fork's copy) into the record: a meaningful change takes the
        /// space's next version, anything else is superseded.
        mutating func write(_ op: Op, copying copied: Copied?, to record: inout StoredRecord) -> OpResult {
            let before = record.state
            if let copied {
                record.state.fork(copied.document, from: copied.namedID, at: op.stamp)
                forked.insert(copied.source)
            } else {
                record.state.apply(op)
            }
            if before.visibility?.publicID != record.state.visibility?.publicID {
                if let old = before.visibility?.publicID { owners[old] = nil }
                if let new = record.state.visibility?.publicID { owners[new] = .some(record.key) }
            }
            if record.creator == nil, record.state.hasData, let judge { record.creator = judge.user }
            if record.state.differsMeaningfully(from: before) {
                counter += 1
                record.version = counter
                record.updatedBy = deviceID
                changed[record.key] = record
                return OpResult(opID: op.opID, status: .applied, version: counter)
            } else {
                if record.state != before { changed[record.key] = record }
                return OpResult(opID: op.opID, status: .superseded)
            }
        }
    }

    struct ForkRefusal: Error {
        let reason: String
        static let notFound = ForkRefusal(reason: RejectReason.notFound)
        static let notForkable = ForkRefusal(reason: RejectReason.notForkable)
    }

    /// What a fork copies: the source's data, the source, and the public id the fork may
    /// name as `forked_from`.
    struct Copied {
        let document: [String: JSONValue]
        let source: ForkedRecord
        /// The source's id when the fork's readers could read it anyway: a record of the
        /// same space, or one listed publicly. An unlisted record of another space is as
        /// private as its id, so the fork does not pass the id on (nil).
        let namedID: String?
    }

    /// The data a fork of `publicID` copies, or why it cannot. A record of this user that
    /// holds the id (loaded, or published earlier in this job) is read as the job has left
    /// it so far; it must be readable (public or unlisted) under that id.
    static func forkable(
        _ publicID: String, in sources: [String: ForkSource], records: [RecordKey: StoredRecord]
    ) -> Result<Copied, ForkRefusal> {
        if let own = records.values.first(where: { $0.state.visibility?.publicID == publicID }) {
            guard own.state.shownPublicID == publicID else { return .failure(.notFound) }
            return own.state.visibility?.canFork == true
                ? .success(Copied(document: own.state.fields, source: ForkedRecord(space: nil, key: own.key), namedID: publicID))
                : .failure(.notForkable)
        }
        guard case .other(let space, let key, let data, let canFork, let listed)? = sources[publicID] else {
            return .failure(.notFound)
        }
        return canFork
            ? .success(Copied(document: data, source: ForkedRecord(space: space, key: key), namedID: listed ? publicID : nil))
            : .failure(.notForkable)
    }

    /// Ops the applier refuses by rule rather than by merge.
    static func rejection(of op: Op) -> String? {
        op.hlc == nil ? "missing_hlc" : nil
    }
}
