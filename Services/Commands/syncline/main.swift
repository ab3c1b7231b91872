import Fanout
import Foundation
import Gateway
import Purge
import Syncctl
import Worker

// The container image's one binary: the five commands are links to it, and it runs the one
// it was invoked as (`gateway`, …) or the one named by its first argument (`syncline gateway`).
// One binary holds the Swift runtime and the shared code once instead of five times.
let commands: [String: @Sendable ([String]) async -> Void] = [
    "gateway": GatewayMain.run, "worker": WorkerMain.run, "fanout": FanoutMain.run,
    "purge": PurgeMain.run, "syncctl": SyncctlMain.run,
]
var arguments = Array(CommandLine.arguments.dropFirst())
let invokedAs = URL(fileURLWithPath: CommandLine.arguments.first ?? "").lastPathComponent
if let command = commands[invokedAs] {
    await command(arguments)
} else if let name = arguments.first, let command = commands[name] {
    await command(Array(arguments.dropFirst()))
} else {
    FileHandle.standardError.write(Data("usage: syncline \(commands.keys.sorted().joined(separator: "|")) [arguments]\n".utf8))
    exit(2)
}
