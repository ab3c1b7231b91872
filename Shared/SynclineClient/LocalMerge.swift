import SyncModels

/// The record a device shows: the server's record with the device's unconfirmed ops
/// applied on top by the server's own merge rules, so that what the user sees now is
/// what the server will hold once they are applied (everyone converges).
enum LocalMerge {
    /// The server's record as a merge state. The server keeps a clock per field; a pull
    /// carries only the record's newest clock, so every field takes that one. A local op
    /// is newer than it (the client's clock observes every pulled clock), so it wins, as
    /// it will on the server.
    static func state(of server: RecordView) -> RecordState {
        let stamp = Stamp(hlc: server.hlc ?? "", opID: "")
        var state = RecordState(floor: stamp)
        if server.deleted {
            state.deleteClock = stamp
        } else {
            state.fields = server.data ?? [:]
            state.fieldClocks = state.fields.mapValues { _ in stamp }
            state.writeClock = stamp
        }
        if server.visibility != .private || server.publicID != nil {
            state.visibility = .init(
                publicID: server.publicID, canFork: server.canFork, listed: server.visibility != .unlisted, clock: stamp)
        }
        if let forkedFrom = server.forkedFrom { state.fork = .init(publicID: forkedFrom, clock: stamp) }
        return state
    }

    /// The record after `ops` (this record's unconfirmed ops, any order): nil when neither
    /// the server nor an op has it. A fork shows once the server has copied its source.
    /// An increment, add or remove the server has not had counts on what it holds, however
    /// old its clock: it is taken as just newer than the server's record (a whole write
    /// newer than that, of this device, still overrules it).
    static func apply(_ ops: [Op], to server: RecordView?) -> RecordState? {
        guard server != nil || ops.contains(where: { $0.type != .fork }) else { return nil }
        var state = server.map(state(of:)) ?? RecordState()
        let floor = state.floor
        let ordered = ops.map { op in
            guard let floor, op.field != nil, op.stamp <= floor else { return op }
            var counted = op
            counted.hlc = floor.hlc
            return counted
        }
        for op in ordered.sorted(by: { $0.stamp < $1.stamp }) { state.apply(op) }
        return state
    }

    /// A record's data as the device stores what it shows: every RFC 3339 date-time in it
    /// (at any depth) as the same instant in UTC with milliseconds — the form Syncline's
    /// clients write — so that a query compares and orders dates by time, whoever wrote
    /// them (`2026-11-22T10:00:00+01:00` from a backend shows as `2026-11-22T09:00:00.000Z`).
    /// What the server holds is not changed.
    static func shownText(_ data: [String: JSONValue]) -> String {
        JSONWriter.string(.object(data.mapValues(datesInUTC)))
    }

    static func datesInUTC(_ value: JSONValue) -> JSONValue {
        switch value {
        case .string(let text):
            // Most strings are not date-times: a look at two bytes says so.
            let bytes = text.utf8
            guard (20...40).contains(bytes.count), bytes[bytes.index(bytes.startIndex, offsetBy: 4)] == UInt8(ascii: "-"),
                  let canonical = RFC3339.canonicalUTC(text), canonical != text
            else { return value }
            return .string(canonical)
        case .array(let items): return .array(items.map(datesInUTC))
        case .object(let fields): return .object(fields.mapValues(datesInUTC))
        default: return value
        }
    }
}
