import Foundation
import Testing

/// docs/OPERATIONS.md names every environment variable the services read: the names are
/// taken from the services' sources (the settings readers' calls and the environment's
/// subscripts), so a setting added without its line in the docs fails here.
struct SettingsDocumentationTests {
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The modules the five commands are made of (the clients and the benchmarks read
    /// their own settings, documented with them).
    static let serviceModules = [
        "Services/Gateway", "Services/Worker", "Services/Fanout", "Services/Purge", "Services/Syncctl",
        "Shared/ServiceSupport", "Shared/HTTPSupport", "Shared/Persistence", "Shared/Telemetry", "Shared/Operations",
        "Shared/BlobStorage", "Shared/BrokerTopology", "Shared/Auth", "Shared/PQBridge", "Shared/AMQPBridge",
    ]

    /// Read, but not settings: the login name syncctl signs its audit entries with, and the
    /// failpoints only tests set.
    static let notSettings: Set<String> = ["USER"]
    static let testOnlyPrefix = "SYNCLINE_FAILPOINT_"

    static func namesRead() throws -> Set<String> {
        let reads = try NSRegularExpression(
            pattern: #"\.(?:value|flag|int|duration|rate|bytes|list)\("([A-Z][A-Z0-9_]+)"|environment\["([A-Z][A-Z0-9_]+)"\]"#)
        var names = Set<String>()
        for module in serviceModules {
            let folder = root.appendingPathComponent(module)
            let files = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: nil)?
                .compactMap { $0 as? URL }.filter { $0.pathExtension == "swift" } ?? []
            for file in files {
                let text = try String(contentsOf: file, encoding: .utf8)
                for match in reads.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
                    for group in 1...2 {
                        if let range = Range(match.range(at: group), in: text) { names.insert(String(text[range])) }
                    }
                }
            }
        }
        return names.filter { !notSettings.contains($0) && !$0.hasPrefix(testOnlyPrefix) }
    }

    @Test func operationsListsEverySettingTheServicesRead() throws {
        let names = try Self.namesRead()
        // The scan finds the settings every service has: it is not reading nothing.
        #expect(names.isSuperset(of: ["DATABASE_URL", "AMQP_URL", "JWT_SECRET", "WORKER_CONCURRENCY", "PULL_READ_AHEAD"]))
        let operations = try String(contentsOf: Self.root.appendingPathComponent("docs/OPERATIONS.md"), encoding: .utf8)
        let missing = names.filter { !operations.contains("`\($0)`") && !operations.contains("`\($0)=") }.sorted()
        #expect(missing.isEmpty, "docs/OPERATIONS.md does not name: \(missing.joined(separator: ", "))")
    }
}
