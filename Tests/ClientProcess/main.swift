import Foundation
import SynclineClient

/// A device as a process of its own, for tests that kill it: `ClientProcess <gateway> <database> write <n>`
/// writes n records and exits; `ClientProcess <gateway> <database> sync` syncs once and exits 0;
/// `ClientProcess <gateway> <database> live <seconds>` runs the sync loop (with the stream of
/// the fanout at `CLIENT_FANOUT`, when set) for that long. Typed: `save <id> <title> <minutes>`
/// stores a `Recipe`, `update <id> title=<t>|minutes=<m>` changes one field of it, `recipes`
/// prints them all (id, title, minutes per line, by title). The bearer token comes from `CLIENT_TOKEN`;
/// `CLIENT_SPACE` names a shared space to sync instead of the personal one.
let arguments = CommandLine.arguments
guard arguments.count >= 4, let gateway = URL(string: arguments[1]),
      let token = ProcessInfo.processInfo.environment["CLIENT_TOKEN"]
else {
    FileHandle.standardError.write(Data("usage: ClientProcess <gateway> <database> write <n> | sync\n".utf8))
    exit(2)
}
let fanout = ProcessInfo.processInfo.environment["CLIENT_FANOUT"].flatMap(URL.init(string:))
let space = ProcessInfo.processInfo.environment["CLIENT_SPACE"]
let client = try SyncClient(ClientConfiguration(
    gatewayURL: gateway, fanoutURL: fanout, databasePath: arguments[2], spaceID: space, tokenProvider: { _ in token }, deviceName: "process",
    pollInterval: fanout == nil ? nil : 5))
switch arguments[3] {
case "write":
    let count = Int(arguments.count > 4 ? arguments[4] : "1") ?? 1
    for n in 0..<count { try await client.upsert("todos", id: "p\(n)", data: ["n": .int(Int64(n))]) }
    print("wrote \(count)")
case "sync":
    try await client.sync(timeout: 60)
    print("synced")
case "live":
    let seconds = Double(arguments.count > 4 ? arguments[4] : "10") ?? 10
    await client.start()
    try await Task.sleep(for: .seconds(seconds))
    await client.stop()
    print("stopped")
case "save":
    try await client.save(Recipe(id: arguments[4], title: arguments[5], minutes: Int(arguments[6]) ?? 0))
    print("saved")
case "update":
    let (field, value) = (arguments[5].prefix { $0 != "=" }, String(arguments[5].drop { $0 != "=" }.dropFirst()))
    let opID = try await client.update(Recipe.self, id: arguments[4]) { recipe in
        if field == "title" { recipe.title = value } else { recipe.minutes = Int(value) ?? 0 }
    }
    print(opID == nil ? "unchanged" : "updated")
case "recipes":
    for recipe in try await client.fetch(Recipe.self, orderBy: [Field("title").ascending]) {
        print("\(recipe.id) \(recipe.title) \(recipe.minutes)")
    }
default:
    exit(2)
}

struct Recipe: SyncRecord {
    static let collection = "recipes"
    var id: String
    var title: String
    var minutes: Int
}
