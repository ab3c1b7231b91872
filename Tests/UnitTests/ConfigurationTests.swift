import ServiceSupport
import Testing

@Suite("Configuration")
struct ConfigurationTests {
    /// The shared settings read only what every executable reads: a setting of one
    /// executable, even a bad one, never stops the others.
    @Test func sharedSettingsLeaveEachExecutablesOwnAlone() throws {
        let reader = EnvironmentReader([
            "RATE_LIMIT_PUBLIC": "bogus", "WORKER_BATCH_OPS": "-1", "TOMBSTONE_RETENTION": "soon",
            "MAX_ATTEMPTS": "7", "DATABASE_URL": "postgresql://db/x", "CORS_ALLOWED_ORIGINS": " https://a.example , ,*",
        ])
        let configuration = try Configuration.read(reader)
        #expect(configuration.maxAttempts == 7 && configuration.databaseURL == "postgresql://db/x")
        #expect(configuration.retryDelays == [1, 5, 25, 120])
        #expect(throws: Configuration.Invalid.self) { try reader.rate("RATE_LIMIT_PUBLIC", "1/s") }
        #expect(throws: Configuration.Invalid.self) { try reader.int("WORKER_BATCH_OPS", 1) }
        #expect(throws: Configuration.Invalid.self) { try reader.duration("TOMBSTONE_RETENTION", "30d") }
        #expect(reader.list("CORS_ALLOWED_ORIGINS") == ["https://a.example", "*"])
        #expect(try reader.duration("UNSET", "2m") == 120)
    }

    @Test func aBadSharedSettingSaysWhichAndWhy() {
        #expect(throws: Configuration.Invalid.self) { try Configuration.read(EnvironmentReader(["RETRY_DELAYS": "1s,never"])) }
        do {
            _ = try Configuration.read(EnvironmentReader(["DATABASE_POOL_SIZE": "0"]))
            Issue.record("a pool of 0 connections was accepted")
        } catch {
            #expect(error.description == "DATABASE_POOL_SIZE must be a positive integer")
        }
    }

    /// A standby confirms commits only when asked to, for as long as said.
    @Test func theStandbyWaitIsOffUnlessSet() throws {
        #expect(try Configuration.read(EnvironmentReader([:])).databaseStandbyWait == nil)
        #expect(try Configuration.read(EnvironmentReader(["DATABASE_REQUIRE_STANDBY": ""])).databaseStandbyWait == nil)
        #expect(try Configuration.read(EnvironmentReader(["DATABASE_REQUIRE_STANDBY": "1500ms"])).databaseStandbyWait == .milliseconds(1500))
        #expect(throws: Configuration.Invalid.self) { try Configuration.read(EnvironmentReader(["DATABASE_REQUIRE_STANDBY": "yes"])) }
    }
}
