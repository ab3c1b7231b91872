import ArgumentParser
import BlobStorage
import Operations
import Persistence
import SyncModels
import ServiceSupport

struct Users: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage users' account data.", subcommands: [Delete.self])

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete every record, job, device and dead letter of a user (idempotent), closing their streams.")
        @Argument(help: "The user id (the token's user claim).") var user: String

        func run() async throws {
            let location = try EnvironmentReader().blobStore()
            try await withOperations { pool, publisher, office, logger in
                let sweeper = BlobSweeper(catalog: BlobCatalog(pool: pool), stores: try BlobStores(location, pool: pool), logger: logger)
                _ = try await AccountEraser(pool: pool, publisher: publisher, office: office, sweeper: sweeper, logger: logger)
                    .erase(user: UserID(user), budget: .infinity)
            }
            print("deleted the account data of \(user)")
        }
    }
}
