import Worker

await WorkerMain.run(arguments: Array(CommandLine.arguments.dropFirst()))
