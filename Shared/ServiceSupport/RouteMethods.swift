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
        let methods = table.withLockedValue { table in
            table.filter { entry in
                entry.components.count == parts.count
                    && zip(entry.components, parts).allSatisfy { $0.hasPrefix("{") || $0.hasPrefix(":") || $0 == "*" || $0 == $1 }
            }.reduce(into: Set<String>()) { $0.formUnion($1.methods) }
        }
        return methods.isEmpty ? nil : methods.sorted()
    }
}
