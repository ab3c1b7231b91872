import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers

/// Which methods each route template answers, read from a router once its routes are
/// registered, so a known path asked with another method gets 405 with `Allow` instead
/// of 404 (Hummingbird's router answers 404 for both).
public final class RouteMethods: Sendable {
    private let table = NIOLockedValueBox<[(components: [Substring], methods: Set<String>)]>([])

    public init() {}

    public func load<Context>(from router: Router<Context>) {
        var byPath: [String: Set<String>] = [:]
        for route in router.routes { byPath["\(route.path)", default: []].insert(route.method.rawValue) }
        table.withLockedValue { table in
            table = byPath.map { (path, methods) in
                (path.split(separator: "/"), methods.union(methods.contains("GET") ? ["HEAD"] : []))
            }
        }
    }

    /// The methods answered at `path`, or nil when no route template matches it.
    public func allowed(path: String) -> [String]? {
        let parts = path.split(separator: "/")
        func isCapture(_ component: Substring) -> Bool { component.hasPrefix("{") || component.hasPrefix(":") || component == "*" }
        let methods = table.withLockedValue { table -> Set<String> in
            let matches = table.filter { entry in
                entry.components.count == parts.count
                    && zip(entry.components, parts).allSatisfy { isCapture($0) || $0 == $1 }
            }
            // The router prefers literal segments: `/dead-letters/replay` is that route
            // alone, not also `/dead-letters/{job_id}`.
            let literals = { (entry: (components: [Substring], methods: Set<String>)) in entry.components.filter { !isCapture($0) }.count }
            let best = matches.map(literals).max()
            return matches.filter { literals($0) == best }.reduce(into: Set<String>()) { $0.formUnion($1.methods) }
        }
        return methods.isEmpty ? nil : methods.sorted()
    }
}
