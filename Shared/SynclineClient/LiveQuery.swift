import Foundation
import SyncModels
#if canImport(Observation)
import Observation
#endif
#if canImport(Combine)
import Combine
#endif

/// What a live query shows: its records, the sync status, and why it could not run.
@MainActor
protocol LiveQueryView: AnyObject {
    associatedtype Record: SyncRecord
    func show(_ records: [Record], failures: [UndecodableRecord])
    func show(_ status: SyncStatus)
    func show(_ error: ClientError?)
}

/// The tasks a live query runs, cancelled when the query object goes away.
final class Subscriptions: Sendable {
    private let tasks = Locked<[Task<Void, Never>]>([])

    func add(_ task: Task<Void, Never>) { tasks.withLock { $0.append(task) } }

    /// Follows a typed query and the client's status on the main actor, for as long as
    /// these subscriptions live, showing them in `view` (held weakly).
    @MainActor
    func follow<View: LiveQueryView>(_ client: SyncClient, _ query: RecordQuery, in view: View) {
        add(Task { @MainActor [weak view] in
            do {
                for await results in try await client.observeDecoded(View.Record.self, query) {
                    view?.show(results.records, failures: results.failures)
                }
            } catch {
                view?.show(error as? ClientError)
            }
        })
        add(Task { @MainActor [weak view] in
            for await current in client.statusUpdates { view?.show(current) }
        })
    }

    deinit { tasks.withLock { $0 }.forEach { $0.cancel() } }
}

#if canImport(Observation)
/// A query's records and the sync status, kept current on the main actor for SwiftUI
/// (iOS 17, macOS 14 and later; `LiveQueryObject` is the iOS 16 form):
///
/// ```swift
/// struct RecipeList: View {
///     @State var quick: LiveQuery<Recipe>
///     init(client: SyncClient) {
///         _quick = State(initialValue: LiveQuery(client, where: Field("minutes") <= 30, orderBy: [Field("title").ascending]))
///     }
///     var body: some View {
///         List(quick.records) { Text($0.title) }
///             .overlay(alignment: .bottom) { if let status = quick.status, status.pendingOps > 0 { Text("\(status.pendingOps) to sync") } }
///     }
/// }
/// ```
@available(macOS 14, iOS 17, tvOS 17, watchOS 10, *)
@MainActor @Observable
public final class LiveQuery<Record: SyncRecord> {
    /// The query's records, as the device shows them.
    public private(set) var records: [Record] = []
    /// The client's sync status (nil until first known).
    public private(set) var status: SyncStatus?
    /// Why the query could not run (an invalid query), if it could not.
    public private(set) var error: ClientError?
    /// The records the query selects whose data does not decode as `Record`: left out of
    /// `records`, each with why (also reported once as `SyncEvent.undecodable`).
    public private(set) var failures: [UndecodableRecord] = []
    @ObservationIgnored private let subscriptions = Subscriptions()

    public init(_ client: SyncClient, where filter: Filter? = nil, orderBy order: [Ordering] = [], limit: Int? = nil) {
        subscriptions.follow(client, RecordQuery(Record.collection, where: filter, orderBy: order, limit: limit), in: self)
    }
}

@available(macOS 14, iOS 17, tvOS 17, watchOS 10, *)
extension LiveQuery: LiveQueryView {
    func show(_ records: [Record], failures: [UndecodableRecord]) { (self.records, self.failures) = (records, failures) }
    func show(_ status: SyncStatus) { self.status = status }
    func show(_ error: ClientError?) { self.error = error }
}
#endif

#if canImport(Combine)
/// `LiveQuery` as an `ObservableObject`, for SwiftUI on iOS 16 and macOS 13.
@MainActor
public final class LiveQueryObject<Record: SyncRecord>: ObservableObject {
    @Published public private(set) var records: [Record] = []
    @Published public private(set) var status: SyncStatus?
    @Published public private(set) var error: ClientError?
    @Published public private(set) var failures: [UndecodableRecord] = []
    private let subscriptions = Subscriptions()

    public init(_ client: SyncClient, where filter: Filter? = nil, orderBy order: [Ordering] = [], limit: Int? = nil) {
        subscriptions.follow(client, RecordQuery(Record.collection, where: filter, orderBy: order, limit: limit), in: self)
    }
}

extension LiveQueryObject: LiveQueryView {
    func show(_ records: [Record], failures: [UndecodableRecord]) { (self.records, self.failures) = (records, failures) }
    func show(_ status: SyncStatus) { self.status = status }
    func show(_ error: ClientError?) { self.error = error }
}
#endif
