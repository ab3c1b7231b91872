import ArgumentParser
import Operations

struct Users: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage users' account data.", subcommands: [Delete.self])

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete every record, job, device and dead letter of a user (idempotent), closing their streams.")
        @Argument(help: "The user id (the token's user claim).") var user: String

        func run() async throws {
            try await withOperations { pool, publisher, office, logger in
                _ = try await AccountEraser(pool: pool, publisher: publisher, office: office, logger: logger)
                    .erase(user: user, budget: .infinity)
            }
            print("deleted the account data of \(user)")
        }
    }
}
