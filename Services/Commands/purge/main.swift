import Purge

await PurgeMain.run(arguments: Array(CommandLine.arguments.dropFirst()))
