import ArgumentParser
import Foundation
import Operations
import SyncModels

struct RulesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rules", abstract: "The app's rules: schemas and write rights per collection.",
        subcommands: [Apply.self, Show.self, History.self, Types.self])

    struct Apply: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check a rules document (YAML or JSON) and store it as the next version; gateways and workers follow within seconds.")

        @Argument(help: "The document: .yaml/.yml is read as YAML, anything else as JSON; - reads standard input as YAML.")
        var file: String
        @Option(help: "Who applies it, for the history and the audit log.") var actor = "syncctl"
        @Flag(help: "Only check the document; store nothing.") var check = false

        func run() async throws {
            let text: String
            if file == "-" {
                text = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
            } else {
                guard let data = FileManager.default.contents(atPath: file) else { throw ValidationError("cannot read \(file)") }
                text = String(decoding: data, as: UTF8.self)
            }
            let format = RulesCommand.format(of: file)
            let rules: Rules
            switch Result(catching: { () throws(RulesError) in try RulesBook.read(text, format: format) }) {
            case .success(let read): rules = read
            case .failure(let error): throw ValidationError("\(file) was refused, nothing stored: \(error)")
            }
            if check {
                print("\(file): valid; names \(rules.collections.count) collection(s), default \(rules.allowsUnnamed ? "allow" : "deny")")
                return
            }
            let version = try await withPool { pool, _ in try await RulesBook(pool: pool).apply(text, format: format, actor: actor) }
            print("applied rules version \(version)")
        }
    }

    /// `.yaml`/`.yml` and standard input (`-`) are YAML; anything else is JSON.
    static func format(of file: String) -> RulesBook.Format {
        file == "-" || file.hasSuffix(".yaml") || file.hasSuffix(".yml") ? .yaml : .json
    }

    struct Types: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the record types the rules' schemas describe: Swift SyncRecord structs or SynclineWeb schema values.")

        @Flag(help: "Swift (SynclineClient).") var swift = false
        @Flag(help: "TypeScript (SynclineWeb).") var typescript = false
        @Argument(help: "A rules document (YAML or JSON); without one, the current stored version.") var file: String?

        func validate() throws {
            guard swift != typescript else { throw ValidationError("give one of --swift and --typescript") }
        }

        func run() async throws {
            let rules: Rules
            if let file {
                guard let data = FileManager.default.contents(atPath: file) else { throw ValidationError("cannot read \(file)") }
                let text = String(decoding: data, as: UTF8.self)
                switch Result(catching: { () throws(RulesError) in try RulesBook.read(text, format: RulesCommand.format(of: file)) }) {
                case .success(let read): rules = read
                case .failure(let error): throw ValidationError("\(file) is not a valid rules document: \(error)")
                }
            } else {
                rules = try await withPool { pool, _ in try await RulesBook(pool: pool).current() }
            }
            print(swift ? RecordTypes.swift(rules) : RecordTypes.typescript(rules), terminator: "")
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the current rules document, with its version, as JSON.")

        func run() async throws {
            let rules = try await withPool { pool, _ in try await RulesBook(pool: pool).current() }
            print(JSONWriter.string(rules.versionedDocument))
        }
    }

    struct History: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the stored versions, newest first.")

        @Option(help: "How many versions.") var limit = 20

        func run() async throws {
            let versions = try await withPool { pool, _ in try await RulesBook(pool: pool).history(limit: limit) }
            for version in versions {
                print("\(version.version)\t\(version.appliedAt)\t\(version.appliedBy)\t\(version.collections.joined(separator: ","))")
            }
        }
    }
}
