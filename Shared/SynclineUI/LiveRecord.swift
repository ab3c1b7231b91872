import Foundation
import SynclineClient
#if canImport(Observation)
import Observation
#endif

/// Where one record stands on the device, for a detail screen: not read yet, not there
/// (never written, deleted, or out of the space), there, or there in a form the record
/// type cannot read.
public enum LiveRecordState<Record: SyncRecord>: Sendable {
    case loading
    case missing
    case present(RecordRow<Record>)
    case undecodable(UndecodableRecord)

    init(_ results: QueryResults<Record>) {
        if let row = results.rows.first {
            self = .present(row)
        } else if let failure = results.failures.first {
            self = .undecodable(failure)
        } else {
            self = .missing
        }
    }

    /// The record, when present.
    public var record: Record? {
        if case .present(let row) = self { return row.record }
        return nil
    }
}

extension LiveRecordState: Equatable where Record: Equatable {}

#if canImport(Observation)
/// One record, kept current on the main actor for SwiftUI (iOS 17, macOS 14 and later):
/// a detail screen tells loading from deleted (`state`), and its `id` may change (a split
/// view's selection).
///
/// ```swift
/// struct RecipeDetail: View {
///     @State private var recipe: LiveRecord<Recipe>
///     init(client: SyncClient, id: String) { _recipe = State(initialValue: LiveRecord(client, id: id)) }
///     var body: some View {
///         switch recipe.state {
///         case .loading: ProgressView()
///         case .missing: ContentUnavailableView("Deleted", systemImage: "trash")
///         case .present(let row): Text(row.title)
///         case .undecodable(let failure): Text("Needs a newer version of the app (\(failure.detail))")
///         }
///     }
/// }
/// ```
@available(macOS 14, iOS 17, tvOS 17, watchOS 10, *)
@MainActor @Observable
public final class LiveRecord<Record: SyncRecord> {
    private var currentID: String
    private var following: SyncClient?
    @ObservationIgnored private let follower = LiveFollower()

    /// Where the record stands.
    public private(set) var state: LiveRecordState<Record> = .loading
    /// The record, when present.
    public var record: Record? { state.record }
    /// The client's sync status (nil until first known).
    public private(set) var status: SyncStatus?

    /// The record followed: change it and `state` is `.loading` until the other one is read.
    public var id: String {
        get { currentID }
        set {
            guard newValue != currentID else { return }
            currentID = newValue
            follow()
        }
    }

    /// The client it reads (nil: none yet, the state stays `.loading`).
    public var client: SyncClient? {
        get { following }
        set {
            guard newValue !== following else { return }
            following = newValue
            follow()
        }
    }

    public init(_ client: SyncClient?, id: String) {
        currentID = id
        following = client
        follow()
    }

    private func follow() {
        state = .loading
        guard let client = following else { return }
        let id = currentID
        follower.follow(
            client, open: { await $0.observe(Record.self, id: id) }, show: { [weak self] in self?.state = LiveRecordState($0) },
            failed: { _ in })
        follower.followStatus(client) { [weak self] in self?.status = $0 }
    }
}
#endif
