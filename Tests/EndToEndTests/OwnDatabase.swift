import Foundation
import PQBridge
import Testing
import TestSupport

/// A database of the test's own, migrated, beside the shared one: for what is the whole
/// deployment's (the rules document), which a test must not leave to the tests after it.
/// Dropped by `with` whatever the test did.
struct OwnDatabase {
    let name: String
    let url: String

    /// Runs `body` with a fresh, migrated database and drops it after.
    static func with<T>(_ body: (OwnDatabase) async throws -> T) async throws -> T {
        let shared = try #require(E2E.databaseURL)
        let name = "syncline_own_\(UUID().uuidString.prefix(8).lowercased())"
        let slash = try #require(shared.range(of: "/", options: .backwards), "DATABASE_URL names a database")
        let query = shared[slash.upperBound...].firstIndex(of: "?").map { String(shared[$0...]) } ?? ""
        let database = OwnDatabase(name: name, url: shared[..<slash.upperBound] + name + query)
        let admin = PGPool(url: shared, size: 1, logger: E2E.logger)
        try await admin.execute("CREATE DATABASE \(sql: name)")
        return try await withCleanup {
            let migrated = await Shell.runOffThePool("DATABASE_URL='\(database.url)' \(E2E.binaries)/syncctl migrate 2>&1")
            try #require(migrated.status == 0, "migrating \(name): \(migrated.output)")
            return try await body(database)
        } cleanup: {
            _ = try? await admin.execute("DROP DATABASE IF EXISTS \(sql: name) WITH (FORCE)")
            await admin.shutdown()
        }
    }

    /// The environment of services that use this database.
    var environment: [String: String] { ["DATABASE_URL": url] }
}
