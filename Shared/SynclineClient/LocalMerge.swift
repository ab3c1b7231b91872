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
    static func apply(_ ops: [Op], to server: RecordView?) -> RecordState? {
        guard server != nil || ops.contains(where: { $0.type != .fork }) else { return nil }
        var state = server.map(state(of:)) ?? RecordState()
        for op in ops.sorted(by: { $0.stamp < $1.stamp }) { state.apply(op) }
        return state
    }
}
