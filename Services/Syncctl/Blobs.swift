import ArgumentParser
import BlobStorage
import Foundation
import Logging
import PQBridge
import Persistence
import ServiceSupport
import SyncModels

struct Blobs: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List, verify and move files (attachments).", subcommands: [List.self, Verify.self, Migrate.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List a space's files as JSON.")
        @Option(help: "The space's id.") var space: SpaceID

        func run() async throws {
            let files = try await withPool { pool, _ in try await BlobCatalog(pool: pool).list(space: space) }
            try printJSON(files)
        }
    }

    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Read a space's files back and check each against its SHA-256; exits 1 if any is damaged.")
        @Option(help: "The space's id.") var space: SpaceID

        func run() async throws {
            let location = try EnvironmentReader().blobStore()
            let damaged = try await withPool { pool, _ in
                let catalog = BlobCatalog(pool: pool)
                let verifier = BlobVerifier(stores: try BlobStores(location, pool: pool))
                var damaged = 0
                for file in try await catalog.list(space: space) {
                    if let problem = await verifier.problem(with: file.blob) {
                        print("\(file.sha256) damaged: \(problem)")
                        damaged += 1
                    } else {
                        print("\(file.sha256) ok (\(file.size) bytes, \(file.store))")
                    }
                }
                return damaged
            }
            if damaged > 0 { throw ExitCode.failure }
        }
    }

    struct Migrate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Move every file from one store to the other while the service runs.",
            discussion: "Set BLOB_STORE to the target afterwards, so that new files go there too.")
        @Option(help: "The target: postgres, or file:<absolute directory>.") var to: String
        @Option(help: "The directory of the file store, when moving from it to postgres.") var fromDirectory: String?
        @Option(help: "Only this space's files (default: every file).") var space: SpaceID?

        func run() async throws {
            guard let target = BlobStoreLocation(to) else { throw ValidationError("--to must be postgres or file:<absolute directory>") }
            let moved = try await withPool { pool, logger in
                let postgres = PostgresBlobStore(pool: pool)
                let from: any BlobStore
                let destination: any BlobStore
                switch target {
                case .postgres:
                    guard let fromDirectory else { throw ValidationError("moving to postgres needs --from-directory") }
                    from = try DirectoryBlobStore(root: URL(fileURLWithPath: fromDirectory))
                    destination = postgres
                case .directory(let path):
                    from = postgres
                    destination = try DirectoryBlobStore(root: URL(fileURLWithPath: path))
                }
                let catalog = BlobCatalog(pool: pool)
                let moved = try await BlobMigration(catalog: catalog, from: from, to: destination).run(space: space)
                try await BlobSweeper(catalog: catalog, stores: BlobStores(writing: destination, others: [from]), logger: logger).sweep()
                return moved
            }
            print("moved \(moved.objects) files (\(moved.bytes) bytes) to \(to)")
            for (sha256, error) in moved.unreadable { print("\(sha256) not moved: \(error)") }
            if !moved.unreadable.isEmpty { throw ExitCode.failure }
        }
    }
}
