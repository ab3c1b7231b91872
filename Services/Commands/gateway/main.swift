import Gateway

await GatewayMain.run(arguments: Array(CommandLine.arguments.dropFirst()))
