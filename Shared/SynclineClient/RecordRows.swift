import Foundation
import SyncModels

/// A typed record with where this device's edits to it stand: what a list row shows (a
/// "waiting to sync" mark, a refused edit) beside the record's own fields, which it reads
/// as its own (`row.title`).
@dynamicMemberLookup
public struct RecordRow<Record: SyncRecord>: Identifiable, Sendable {
    public let record: Record
    /// Whether the server has confirmed what shows, an edit waits, or one was refused.
    public let syncState: RecordSyncState
    /// The server version the row is based on (0 before the server has it).
    public let version: Int64

    public var id: String { record.id }

    public subscript<Value>(dynamicMember field: KeyPath<Record, Value>) -> Value { record[keyPath: field] }
}

extension RecordRow: Equatable where Record: Equatable {}

/// A typed query as a value: what a view holds and changes (a search field's text, a
/// sort picker) to show other records, without making a new observer object.
public struct RecordRequest<Record: SyncRecord>: Sendable, Equatable {
    public var filter: Filter?
    public var order: [Ordering]
    public var limit: Int?

    public init(where filter: Filter? = nil, orderBy order: [Ordering] = [], limit: Int? = nil) {
        self.filter = filter
        self.order = order
        self.limit = limit
    }

    public var query: RecordQuery { RecordQuery(Record.collection, where: filter, orderBy: order, limit: limit) }
}

/// A typed query's results: the rows that decode, in order, and the records left out
/// because their data does not decode as `Record` (each also reported once as
/// `SyncEvent.undecodable`).
public struct QueryResults<Record: SyncRecord>: Sendable {
    public let rows: [RecordRow<Record>]
    public let failures: [UndecodableRecord]

    public var records: [Record] { rows.map(\.record) }
}

extension SyncClient {
    /// The records the request selects, each with its sync state.
    public func rows<Record: SyncRecord>(_ request: RecordRequest<Record>) throws -> QueryResults<Record> {
        decodedRows(Record.self, try records(request.query))
    }

    /// Yields the request's rows now and whenever they change (as `observe(_:)` does).
    public func observe<Record: SyncRecord>(_ request: RecordRequest<Record>) throws -> AsyncStream<QueryResults<Record>> {
        try observe(request.query) { self.decodedRows(Record.self, $0) }
    }

    /// Yields one record now and after every change to it: nil while it does not exist
    /// (or is deleted, or its data does not decode — then reported as `SyncEvent.undecodable`).
    public func observe<Record: SyncRecord>(_ type: Record.Type, id: String) -> AsyncStream<QueryResults<Record>> {
        // A query on the id cannot be invalid.
        (try? observe(RecordQuery(Record.collection, where: Field.id == id, limit: 1)) { self.decodedRows(Record.self, $0) })
            ?? AsyncStream { $0.finish() }
    }

    /// A typed read's rows: the ones that decode, and the ones left out, which are reported
    /// (`SyncEvent.undecodable`), each version once.
    nonisolated func decodedRows<Record: SyncRecord>(_ type: Record.Type, _ locals: [LocalRecord]) -> QueryResults<Record> {
        var rows: [RecordRow<Record>] = []
        var failures: [UndecodableRecord] = []
        rows.reserveCapacity(locals.count)
        let decoder = RecordCoding.decoder()
        for local in locals {
            do {
                rows.append(RecordRow(
                    record: try RecordCoding.record(Record.self, from: local, using: decoder), syncState: local.syncState,
                    version: local.version))
            } catch ClientError.undecodable(_, _, let detail) {
                failures.append(UndecodableRecord(collection: local.collection, id: local.id, version: local.version, detail: detail))
            } catch {
                failures.append(UndecodableRecord(collection: local.collection, id: local.id, version: local.version, detail: "\(error)"))
            }
        }
        for failure in undecodable.firstTime(failures) { eventSink.yield(.undecodable(failure)) }
        return QueryResults(rows: rows, failures: failures)
    }
}
