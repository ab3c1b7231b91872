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

    @discardableResult
    mutating func apply(_ ops: [Op]) -> [OpResult] {
        let outcome = JobApplier.apply(ops: ops, records: records, knownOpIDs: known, counter: counter, deviceID: "dev")
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
