import Bench

await SynclineBenchMain.run(arguments: Array(CommandLine.arguments.dropFirst()))
