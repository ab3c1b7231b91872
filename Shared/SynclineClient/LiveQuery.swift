import Foundation
import SyncModels
#if canImport(Observation)
import Observation
#endif
#if canImport(Combine)
import Combine
#endif

/// The tasks a live query runs, cancelled when the query object goes away.
final class Subscriptions: Sendable {
    private let tasks = Locked<[Task<Void, Never>]>([])

    func add(_ task: Task<Void, Never>) { tasks.withLock { $0.append(task) } }

    /// Follows a typed query and the client's status on the main actor, for as long as
    /// these subscriptions live.
    @MainActor
    func follow<Record: SyncRecord>(
        _ client: SyncClient, _ query: RecordQuery, records: @escaping @MainActor ([Record], [UndecodableRecord]) -> Void,
        status: @escaping @MainActor (SyncStatus) -> Void, failed: @escaping @MainActor (ClientError?) -> Void
    ) {
        add(Task { @MainActor in
            do {
                for await results in try await client.observeDecoded(Record.self, query) {
                    records(results.records, results.failures)
                }
            } catch {
                failed(error as? ClientError)
            }
        })
        add(Task { @MainActor in
            for await current in client.statusUpdates { status(current) }
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
        subscriptions.follow(
            client, RecordQuery(Record.collection, where: filter, orderBy: order, limit: limit),
            records: { [weak self] in self?.records = $0; self?.failures = $1 }, status: { [weak self] in self?.status = $0 },
            failed: { [weak self] in self?.error = $0 })
    }
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
        subscriptions.follow(
            client, RecordQuery(Record.collection, where: filter, orderBy: order, limit: limit),
            records: { [weak self] in self?.records = $0; self?.failures = $1 }, status: { [weak self] in self?.status = $0 },
            failed: { [weak self] in self?.error = $0 })
    }
}
#endif
