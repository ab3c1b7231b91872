import Foundation
import SynclineClient
#if canImport(Observation)
import Observation
#endif
#if canImport(Combine)
import Combine
#endif

#if canImport(Observation)
/// A query's rows and the sync status, kept current on the main actor for SwiftUI (iOS 17,
/// macOS 14 and later; `LiveQueryObject` is the iOS 16 form). Its `request` is a value the
/// view changes — a search field's text, a sort picker — and the rows follow; its `client`
/// may come later (from the environment):
///
/// ```swift
/// struct RecipeList: View {
///     @State private var recipes = LiveQuery<Recipe>(nil, request: RecordRequest(orderBy: [Recipe.field(.title).ascending]))
///     @State private var search = ""
///     @Environment(\.syncClient) private var client
///     var body: some View {
///         List(recipes.rows) { row in
///             HStack { Text(row.title); if row.syncState == .pending { Image(systemName: "arrow.triangle.2.circlepath") } }
///         }
///         .searchable(text: $search)
///         .onChange(of: search) { recipes.request.filter = search.isEmpty ? nil : Recipe.field(.title).contains(search) }
///         .task { recipes.client = client }
///     }
/// }
/// ```
@available(macOS 14, iOS 17, tvOS 17, watchOS 10, *)
@MainActor @Observable
public final class LiveQuery<Record: SyncRecord>: LiveQueryModel {
    var state: LiveQueryState<Record>
    var following: SyncClient?
    @ObservationIgnored let follower = LiveFollower()

    /// The query: change it and the rows follow (the old rows show until the new ones come).
    public var request: RecordRequest<Record> {
        get { state.request }
        set { change(request: newValue) }
    }

    /// The client it reads (nil: none yet, nothing shows).
    public var client: SyncClient? {
        get { following }
        set { change(client: newValue) }
    }

    /// The query's records with their sync state, as the device shows them.
    public var rows: [RecordRow<Record>] { state.rows }
    /// The query's records.
    public var records: [Record] { state.rows.map(\.record) }
    /// True from a change of request (or client) until its first results.
    public var isLoading: Bool { state.isLoading }
    /// The client's sync status (nil until first known).
    public internal(set) var status: SyncStatus?
    /// Why the query could not run (an invalid query), if it could not.
    public var error: ClientError? { state.error }
    /// The records the query selects whose data does not decode as `Record`: left out of
    /// `rows`, each with why (also reported once as `SyncEvent.undecodable`).
    public var failures: [UndecodableRecord] { state.failures }

    public init(_ client: SyncClient?, request: RecordRequest<Record> = RecordRequest()) {
        state = LiveQueryState(request: request)
        following = client
        follow()
    }

    public convenience init(_ client: SyncClient, where filter: Filter? = nil, orderBy order: [Ordering] = [], limit: Int? = nil) {
        self.init(client, request: RecordRequest(where: filter, orderBy: order, limit: limit))
    }
}
#endif

#if canImport(Combine)
/// `LiveQuery` as an `ObservableObject`, for SwiftUI on iOS 16 and macOS 13.
@MainActor
public final class LiveQueryObject<Record: SyncRecord>: ObservableObject, LiveQueryModel {
    @Published var state: LiveQueryState<Record>
    @Published public internal(set) var status: SyncStatus?
    var following: SyncClient?
    let follower = LiveFollower()

    public var request: RecordRequest<Record> {
        get { state.request }
        set { change(request: newValue) }
    }

    public var client: SyncClient? {
        get { following }
        set { change(client: newValue) }
    }

    public var rows: [RecordRow<Record>] { state.rows }
    public var records: [Record] { state.rows.map(\.record) }
    public var isLoading: Bool { state.isLoading }
    public var error: ClientError? { state.error }
    public var failures: [UndecodableRecord] { state.failures }

    public init(_ client: SyncClient?, request: RecordRequest<Record> = RecordRequest()) {
        state = LiveQueryState(request: request)
        following = client
        follow()
    }

    public convenience init(_ client: SyncClient, where filter: Filter? = nil, orderBy order: [Ordering] = [], limit: Int? = nil) {
        self.init(client, request: RecordRequest(where: filter, orderBy: order, limit: limit))
    }
}
#endif

/// What `LiveQuery` and `LiveQueryObject` share: a request and a client that may change,
/// and the rows and status they follow.
@MainActor
protocol LiveQueryModel: AnyObject {
    associatedtype Record: SyncRecord
    var state: LiveQueryState<Record> { get set }
    var following: SyncClient? { get set }
    var status: SyncStatus? { get set }
    var follower: LiveFollower { get }
}

extension LiveQueryModel {
    func change(request: RecordRequest<Record>) {
        guard request != state.request else { return }
        state.requested(request)
        follow()
    }

    func change(client: SyncClient?) {
        guard client !== following else { return }
        following = client
        state.requested(state.request)
        follow()
    }

    func follow() {
        guard let client = following else { return }
        let request = state.request
        follower.follow(
            client, open: { try await $0.observe(request) }, show: { [weak self] in self?.state.show($0) },
            failed: { [weak self] in self?.state.fail($0) })
        follower.followStatus(client) { [weak self] in self?.status = $0 }
    }
}
