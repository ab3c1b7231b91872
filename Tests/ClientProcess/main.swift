import Foundation
import SynclineClient

/// A device as a process of its own, for tests that kill it: `ClientProcess <gateway> <database> write <n>`
/// writes n records and exits; `ClientProcess <gateway> <database> sync` syncs once and exits 0.
/// The bearer token comes from `CLIENT_TOKEN`.
let arguments = CommandLine.arguments
guard arguments.count >= 4, let gateway = URL(string: arguments[1]),
      let token = ProcessInfo.processInfo.environment["CLIENT_TOKEN"]
else {
    FileHandle.standardError.write(Data("usage: ClientProcess <gateway> <database> write <n> | sync\n".utf8))
    exit(2)
}
let client = try SyncClient(ClientConfiguration(
    gatewayURL: gateway, databasePath: arguments[2], tokenProvider: { _ in token }, deviceName: "process", pollInterval: nil))
switch arguments[3] {
case "write":
    let count = Int(arguments.count > 4 ? arguments[4] : "1") ?? 1
    for n in 0..<count { try await client.upsert("todos", id: "p\(n)", data: ["n": .int(Int64(n))]) }
    print("wrote \(count)")
case "sync":
    try await client.sync(timeout: 60)
    print("synced")
default:
    exit(2)
}
