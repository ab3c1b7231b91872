import ArgumentParser
import BlobStorage
import Foundation
import Operations
import PQBridge
import Persistence
import ServiceSupport
import SyncModels

/// Runs `body` with the operators' tools for the app's backend.
func withBackendAccess<T: Sendable>(_ body: (BackendAccess) async throws -> T) async throws -> T {
    let configuration = try Configuration.fromEnvironment()
    return try await withPool { pool, _ in
        do {
            return try await body(BackendAccess(pool: pool, allowPrivate: configuration.allowPrivateWebhooks))
        } catch let refusal as BackendAccess.Refusal {
            throw ValidationError(refusal.description)
        }
    }
}

struct ServiceTokens: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "service-tokens", abstract: "Create, list and revoke the tokens of the app's backend (the data API).",
        subcommands: [Create.self, List.self, Revoke.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a service token; prints it once (only its digest is kept).")
        @Option(help: "What the token is for (shown in lists and the audit log).") var name: String
        @Option(parsing: .upToNextOption, help: "The spaces it may reach (ids).") var spaces: [String] = []
        @Flag(help: "Every space, present and future.") var all = false
        @Flag(help: "Reads only: no push, no space or member changes.") var readOnly = false
        @Flag(help: "Print JSON.") var json = false

        func validate() throws {
            guard all != !spaces.isEmpty else { throw ValidationError("give --spaces S… or --all") }
        }

        func run() async throws {
            let created = try await withBackendAccess {
                try await $0.createToken(name: name, spaces: all ? nil : spaces, readOnly: readOnly, actor: syncctlActor)
            }
            if json { return try printJSON(created) }
            print(created.token)
            FileHandle.standardError.write(Data(
                "service token \(created.serviceToken.tokenID) created; the token above is shown only now\n".utf8))
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the service tokens as JSON (never the tokens).")

        func run() async throws {
            struct Listed: Encodable { let items: [ServiceTokenView] }
            try printJSON(Listed(items: try await withBackendAccess { try await $0.listTokens() }))
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke a service token: refused from its next request on.")
        @Argument(help: "The token's id (token_id).") var id: ServiceTokenID

        func run() async throws {
            guard try await withBackendAccess({ try await $0.revokeToken(id, actor: syncctlActor) }) else {
                throw ValidationError("no service token \(id)")
            }
            print("revoked \(id)")
        }
    }
}

struct Feeds: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Record feeds: every applied change, signed, to an endpoint of the app's backend.",
        subcommands: [Create.self, List.self, Delete.self, Replay.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Subscribe an endpoint; prints the feed with its signing secret (shown only now).")
        @Option(help: "Where batches are POSTed (http or https).") var url: String
        @Option(parsing: .upToNextOption, help: "Only these spaces (ids); default: every space.") var spaces: [String] = []
        @Option(parsing: .upToNextOption, help: "Only these collections; default: every collection.") var collections: [String] = []
        @Flag(help: "Deliver everything the spaces hold, not only changes from now on.") var fromStart = false

        func run() async throws {
            try printJSON(try await withBackendAccess {
                try await $0.createFeed(
                    url: url, spaces: spaces.isEmpty ? nil : spaces, collections: collections.isEmpty ? nil : collections,
                    fromStart: fromStart, actor: syncctlActor)
            })
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the feeds and how far each space was delivered, as JSON.")

        func run() async throws {
            struct Listed: Encodable { let items: [FeedView] }
            try printJSON(Listed(items: try await withBackendAccess { try await $0.listFeeds() }))
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Stop and delete a feed.")
        @Argument(help: "The feed's id.") var id: FeedID

        func run() async throws {
            guard try await withBackendAccess({ try await $0.deleteFeed(id, actor: syncctlActor) }) else {
                throw ValidationError("no feed \(id)")
            }
            print("deleted \(id)")
        }
    }

    struct Replay: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Deliver again from a version (or go on where a stopped feed stopped).")
        @Argument(help: "The feed's id.") var id: FeedID
        @Option(help: "Only this space.") var space: SpaceID?
        @Option(help: "Deliver every change after this version (0: everything).") var from: Int64?

        func run() async throws {
            guard let moved = try await withBackendAccess({
                try await $0.replayFeed(id, space: space, from: from, actor: syncctlActor)
            }) else { throw ValidationError("no feed \(id)") }
            print("\(moved) position\(moved == 1 ? "" : "s") of \(id) will deliver again")
        }
    }
}

struct Export: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write a space (or every space of a user) as NDJSON to standard output or a file.",
        discussion: "Records keep their clocks and tombstones; members and files' metadata come along, and the files' bytes with --files.")
    @Option(help: "The space's id.") var space: SpaceID?
    @Option(help: "Every space this user is a member of.") var user: String?
    @Option(help: "Also copy the files' bytes into this directory (one file per SHA-256).") var files: String?
    @Option(name: .shortAndLong, help: "Write to this file instead of standard output.") var output: String?

    func validate() throws {
        guard (space == nil) != (user == nil) else { throw ValidationError("give --space S or --user U") }
    }

    func run() async throws {
        let location = try EnvironmentReader().blobStore()
        let handle: FileHandle
        if let output {
            FileManager.default.createFile(atPath: output, contents: nil)
            guard let file = FileHandle(forWritingAtPath: output) else { throw ValidationError("cannot write \(output)") }
            handle = file
        } else {
            handle = FileHandle.standardOutput
        }
        let counts = try await withPool { pool, _ in
            let export = SpaceExport(pool: pool)
            var spaces = space.map { [$0] } ?? []
            if let user { spaces = try await export.spaces(of: UserID(user)) }
            let counts = try await export.write(spaces: spaces, to: ExportSink(handle: handle))
            if let files {
                try await export.copyFiles(counts.files, stores: try BlobStores(location, pool: pool), to: URL(fileURLWithPath: files))
            }
            return counts
        }
        if output != nil { try handle.close() }
        FileHandle.standardError.write(Data(
            "exported \(counts.spaces) space(s), \(counts.records) records, \(counts.files.count) files\n".utf8))
    }
}

struct Import: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Load an export into new spaces of this deployment; prints the new spaces' ids as JSON.")
    @Argument(help: "The export (NDJSON), or - for standard input.") var input: String
    @Option(help: "The directory the export's files were copied to (syncctl export --files).") var files: String?

    func run() async throws {
        let location = try EnvironmentReader().blobStore()
        guard let handle = input == "-" ? FileHandle.standardInput : FileHandle(forReadingAtPath: input) else {
            throw ValidationError("cannot read \(input)")
        }
        let reader = LineReader(handle: handle)
        let imported = try await withPool { pool, _ in
            let ingest = BlobIngest(
                catalog: BlobCatalog(pool: pool), stores: try BlobStores(location, pool: pool), maxBytes: .max, spaceQuota: .max)
            do {
                return try await SpaceImport(pool: pool, ingest: ingest).run(files: files.map { URL(fileURLWithPath: $0) }) {
                    try reader.next()
                }
            } catch let invalid as SpaceImport.Invalid {
                throw ValidationError("the export was refused at \(invalid)")
            }
        }
        try printJSON(imported)
    }
}

struct Restored: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "After restoring the database from a backup, before starting the services: a new generation.",
        discussion: """
            Every space's counter jumps past the versions the restore lost; a device whose cursor is among them gets \
            410 resync_required and pulls from the start, keeping its unpushed ops. Unfinished jobs are published again.
            """)

    func run() async throws {
        let generation = try await withPool { pool, _ in try await DeploymentStore(pool: pool).restored(actor: syncctlActor) }
        print("the deployment is now generation \(generation)")
    }
}
