import BrokerTopology
import Foundation
import ServiceSupport
import SyncModels
import TestSupport
import Testing
import Yams

/// compose.yaml and the Kubernetes manifests read as files, in a second: compose.yaml
/// parses, every service command is an executable Package.swift builds, every variable a
/// service requires is set, and workers can be scaled. scripts/compose-test runs it for real.
@Suite("compose.yaml", .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/docker-compose")))
struct DeploymentTests {
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// What each executable refuses to start without (see ServiceSupport.Configuration).
    static let requiredEnvironment: [String: Set<String>] = [
        "gateway": ["DATABASE_URL", "AMQP_URL", "JWT_SECRET"],
        "worker": ["DATABASE_URL", "AMQP_URL"],
        "purge": ["DATABASE_URL", "AMQP_URL"],
        "fanout": ["DATABASE_URL", "AMQP_URL", "JWT_SECRET"],
        "syncctl": ["DATABASE_URL"],
    ]

    func services() throws -> [String: [String: Any]] {
        let text = try String(contentsOf: Self.root.appendingPathComponent("compose.yaml"), encoding: .utf8)
        let root = try #require(try Yams.load(yaml: text) as? [String: Any])
        return try #require(root["services"] as? [String: [String: Any]])
    }

    func executables() throws -> Set<String> {
        let manifest = try String(contentsOf: Self.root.appendingPathComponent("Package.swift"), encoding: .utf8)
        let pattern = try NSRegularExpression(pattern: #"\.executable\(name: "([a-z]+)""#)
        let range = NSRange(manifest.startIndex..., in: manifest)
        return Set(pattern.matches(in: manifest, range: range).compactMap {
            Range($0.range(at: 1), in: manifest).map { String(manifest[$0]) }
        })
    }

    /// (Waited for off the cooperative pool: docker-compose takes seconds on a busy
    /// machine, and a blocked pool thread would stall the other tests meanwhile.)
    @Test func dockerComposeParsesIt() async throws {
        let compose = Self.root.appendingPathComponent("compose.yaml").path
        let (status, _) = await Shell.runOffThePool("PATH=/usr/bin:/bin docker-compose -f '\(compose)' config -q")
        #expect(status == 0)
    }

    @Test func everyCommandIsABuiltExecutableWithItsEnvironment() throws {
        let built = try executables()
        // The five commands, and the container image's one binary that they link to.
        #expect(built == ["gateway", "worker", "fanout", "purge", "syncctl", "syncline"])
        var seen: Set<String> = []
        // The others are third-party images (PostgreSQL, RabbitMQ, the tracing profile's).
        for (name, service) in try services() where service["image"] as? String == "syncline:local" {
            guard let command = service["command"] as? [String], let executable = command.first else {
                #expect(service["image"] as? String != "syncline:local", "\(name) runs our image without a command")
                continue
            }
            seen.insert(executable)
            #expect(built.contains(executable), "\(name) runs \(executable), which Package.swift does not build")
            let environment = Set((service["environment"] as? [String: Any] ?? [:]).keys)
            let missing = (Self.requiredEnvironment[executable] ?? []).subtracting(environment)
            #expect(missing.isEmpty, "\(name) lacks \(missing.sorted())")
        }
        #expect(seen.isSuperset(of: ["gateway", "worker", "fanout", "purge", "syncctl"]))
    }

    /// With `BLOB_STORE=file:…`, every executable that writes or removes files sees the
    /// same directory: one named volume, mounted where the setting points.
    @Test func theFileStoreIsOneVolumeWhereverFilesAreWrittenOrRemoved() throws {
        let services = try services()
        for name in ["gateway", "purge"] {
            let volumes = services[name]?["volumes"] as? [String] ?? []
            #expect(volumes.contains("blobs:/var/lib/syncline/blobs"), "\(name): \(volumes)")
        }
        let text = try String(contentsOf: Self.root.appendingPathComponent("compose.yaml"), encoding: .utf8)
        #expect(text.contains("file:/var/lib/syncline/blobs"))
    }

    @Test func workersScale() throws {
        let worker = try #require(try services()["worker"])
        #expect(worker["container_name"] == nil)
        #expect(worker["ports"] == nil)
        #expect((worker["depends_on"] as? [String: Any])?.keys.contains("migrate") == true)
    }

    /// Every container of the Kubernetes manifests runs an executable Package.swift builds,
    /// with the secret that carries what it requires.
    @Test func kubernetesManifestsRunBuiltExecutables() throws {
        let built = try executables()
        let folder = Self.root.appendingPathComponent("deploy/kubernetes")
        var seen: Set<String> = []
        for file in try FileManager.default.contentsOfDirectory(atPath: folder.path) where file.hasSuffix(".yaml") {
            let text = try String(contentsOf: folder.appendingPathComponent(file), encoding: .utf8)
            for document in try Yams.load_all(yaml: text) {
                guard let object = document as? [String: Any] else { continue }
                for container in Self.containers(in: object) {
                    let command = try #require(container["command"] as? [String], "\(file): a container without a command")
                    let executable = try #require(command.first)
                    #expect(built.contains(executable), "\(file) runs \(executable), which Package.swift does not build")
                    let secrets = (container["envFrom"] as? [[String: Any]] ?? []).compactMap { ($0["secretRef"] as? [String: Any])?["name"] as? String }
                    #expect(secrets.contains("syncline"), "\(file): \(executable) lacks the syncline secret")
                    seen.insert(executable)
                }
            }
        }
        #expect(seen == ["gateway", "worker", "fanout", "purge", "syncctl"])
    }

    static func containers(in object: [String: Any]) -> [[String: Any]] {
        var found: [[String: Any]] = []
        for (key, value) in object {
            if key == "containers", let list = value as? [[String: Any]] { found += list }
            if let nested = value as? [String: Any] { found += containers(in: nested) }
        }
        return found
    }

    /// The committed broker definitions are exactly what the services declare.
    @Test func brokerDefinitionsMatchTheTopology() throws {
        let file = Self.root.appendingPathComponent("deploy/kubernetes/rabbitmq-definitions.json")
        let committed = try JSONParser.parse(try String(contentsOf: file, encoding: .utf8))
        #expect(committed == BrokerDefinitions.json(retryDelays: [1, 5, 25, 120]),
                "regenerate with: syncctl topology > deploy/kubernetes/rabbitmq-definitions.json")
    }
}
