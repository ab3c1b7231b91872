import Fanout

await FanoutMain.run(arguments: Array(CommandLine.arguments.dropFirst()))
