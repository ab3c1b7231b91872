import Syncctl

await SyncctlMain.run(arguments: Array(CommandLine.arguments.dropFirst()))
