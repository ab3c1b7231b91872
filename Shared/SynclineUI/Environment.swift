#if canImport(SwiftUI)
import SwiftUI
import SynclineClient

// Not compiled where this package is built and tested (Linux has no SwiftUI): the models
// these views use (`LiveQuery`, `LiveRecord`) are, and their logic is tested there.

private struct SyncClientKey: EnvironmentKey {
    static let defaultValue: SyncClient? = nil
}

extension EnvironmentValues {
    /// The client the views below read (`.syncClient(client)` sets it).
    public var syncClient: SyncClient? {
        get { self[SyncClientKey.self] }
        set { self[SyncClientKey.self] = newValue }
    }
}

extension View {
    /// Gives `client` to the views below, for `@SyncQuery` and `@Environment(\.syncClient)`.
    public func syncClient(_ client: SyncClient) -> some View {
        environment(\.syncClient, client)
    }
}

/// A query's rows in a view, read from the environment's client (GRDBQuery's `@Query` is
/// the model): `$recipes` is the `LiveQuery`, whose `request` the view changes.
///
/// ```swift
/// @SyncQuery(RecordRequest(orderBy: [Recipe.field(.title).ascending])) private var recipes: [RecordRow<Recipe>]
/// …
/// List(recipes) { Text($0.title) }
///     .searchable(text: $search)
///     .onChange(of: search) { $recipes.request.filter = Recipe.field(.title).contains(search) }
/// ```
@available(macOS 14, iOS 17, tvOS 17, watchOS 10, *)
@MainActor @propertyWrapper
public struct SyncQuery<Record: SyncRecord>: DynamicProperty {
    @Environment(\.syncClient) private var client
    @State private var live: LiveQuery<Record>

    public init(_ request: RecordRequest<Record> = RecordRequest()) {
        _live = State(initialValue: LiveQuery(nil, request: request))
    }

    public var wrappedValue: [RecordRow<Record>] { live.rows }
    public var projectedValue: LiveQuery<Record> { live }

    public nonisolated func update() {
        MainActor.assumeIsolated { live.client = client }
    }
}
#endif
