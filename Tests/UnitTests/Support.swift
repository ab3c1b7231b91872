import SyncModels

/// Builds ops tersely: `hlc` is a small number turned into a well-formed clock.
func clock(_ n: Int, node: String = "dev") -> String {
    HLC(milliseconds: 1_763_800_000_000 + Int64(n), counter: 0, node: node)!.description
}

func opID(_ n: Int) -> String {
    let hex = String(n, radix: 16)
    return "00000000-0000-4000-8000-" + String(repeating: "0", count: 12 - hex.count) + hex
}

func upsert(_ n: Int, _ data: [String: JSONValue], at time: Int, id: String = "r1", ifVersion: Int64? = nil) -> Op {
    Op(opID: opID(n), type: .upsert, collection: "todos", id: id, data: data, hlc: clock(time), ifVersion: ifVersion)
}

func patch(_ n: Int, _ data: [String: JSONValue], at time: Int, id: String = "r1", ifVersion: Int64? = nil) -> Op {
    Op(opID: opID(n), type: .patch, collection: "todos", id: id, data: data, hlc: clock(time), ifVersion: ifVersion)
}

func delete(_ n: Int, at time: Int, id: String = "r1", ifVersion: Int64? = nil) -> Op {
    Op(opID: opID(n), type: .delete, collection: "todos", id: id, hlc: clock(time), ifVersion: ifVersion)
}

/// Applies jobs one after another, as the worker does, threading state through.
struct Replica {
    var records: [RecordKey: StoredRecord] = [:]
    var known: Set<String> = []
    var counter: Int64 = 0
    /// Public ids held by other users' records.
    var foreignPublicIDs: Set<String> = []
    /// Other users' readable records a fork may copy, by public id.
    var foreignSources: [String: ForkSource] = [:]
    /// Every record forked so far (what the worker counts once per user).
    var forked: Set<ForkedRecord> = []

    @discardableResult
    mutating func apply(_ ops: [Op]) -> [OpResult] {
        // As the worker does: who holds each public id a publish names.
        var owners: [String: RecordKey?] = foreignPublicIDs.reduce(into: [:]) { $0[$1] = .some(nil) }
        for op in ops where op.type == .publish {
            guard let publicID = op.publicID, owners[publicID] == nil else { continue }
            if let holder = records.values.first(where: { $0.state.visibility?.publicID == publicID }) {
                owners[publicID] = .some(holder.key)
            }
        }
        // As the worker does: a fork's source is a record of this user holding the id, else another's.
        var sources: [String: ForkSource] = [:]
        for op in ops where op.type == .fork {
            guard let publicID = op.publicID else { continue }
            if let holder = records.values.first(where: { $0.state.visibility?.publicID == publicID }) {
                sources[publicID] = .own(holder.key)
            } else if let foreign = foreignSources[publicID] {
                sources[publicID] = foreign
            }
        }
        let outcome = JobApplier.apply(
            ops: ops, records: records, knownOpIDs: known, counter: counter, deviceID: "dev", publicIDOwners: owners,
            forkSources: sources)
        forked.formUnion(outcome.forked)
        for (key, record) in outcome.changed { records[key] = record }
        known.formUnion(outcome.remembered)
        counter = outcome.counter
        return outcome.results
    }

    func state(_ id: String = "r1") -> RecordState? {
        records[RecordKey(collection: "todos", id: id)]?.state
    }

    func version(_ id: String = "r1") -> Int64? {
        records[RecordKey(collection: "todos", id: id)]?.version
    }
}

func publish(
    _ n: Int, _ publicID: String, at time: Int, id: String = "r1", canFork: Bool? = nil, listed: Bool? = nil
) -> Op {
    Op(opID: opID(n), type: .publish, collection: "todos", id: id, hlc: clock(time), publicID: publicID,
       canFork: canFork, listed: listed)
}

func fork(_ n: Int, _ publicID: String, at time: Int, id: String = "r1", ifVersion: Int64? = nil) -> Op {
    Op(opID: opID(n), type: .fork, collection: "todos", id: id, hlc: clock(time), ifVersion: ifVersion, publicID: publicID)
}

/// The space of another user's records that forks copy.
let someoneElsesSpace = SpaceID("5e1f0000-0000-4000-8000-000000000001")!

/// Another user's published (or, with `listed: false`, unlisted) record that forks copy.
func foreignSource(_ data: [String: JSONValue], canFork: Bool = true, listed: Bool = true, id: String = "src") -> ForkSource {
    .other(space: someoneElsesSpace, key: RecordKey(collection: "guides", id: id), data: data, canFork: canFork, listed: listed)
}

func unpublish(_ n: Int, at time: Int, id: String = "r1") -> Op {
    Op(opID: opID(n), type: .unpublish, collection: "todos", id: id, hlc: clock(time))
}

func increment(_ n: Int, _ field: String, by amount: JSONValue, at time: Int, id: String = "r1", node: String = "dev") -> Op {
    Op(opID: opID(n), type: .increment, collection: "todos", id: id, hlc: clock(time, node: node), field: field, by: amount)
}

func add(_ n: Int, _ field: String, _ values: [JSONValue], at time: Int, id: String = "r1") -> Op {
    Op(opID: opID(n), type: .add, collection: "todos", id: id, hlc: clock(time), field: field, values: values)
}

func remove(_ n: Int, _ field: String, _ values: [JSONValue], at time: Int, id: String = "r1") -> Op {
    Op(opID: opID(n), type: .remove, collection: "todos", id: id, hlc: clock(time), field: field, values: values)
}
