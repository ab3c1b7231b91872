import ArgumentParser

/// The `syncline-bench` command: load generators and measurements for a running stack
/// (and one for the client alone). Kept apart from `syncctl`, the operators' tool, so
/// that neither links what only the other needs.
public enum SynclineBenchMain {
    public static func run(arguments: [String]) async { await SynclineBench.main(arguments) }
}

struct SynclineBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "syncline-bench",
        abstract: "Benchmark a Syncline stack, and the Swift client.",
        subcommands: [
            PushBench.self, PullBench.self, PublicBench.self, StreamBench.self, ClientBench.self, ClientLocalBench.self,
            BlobBench.self, SlowClientBench.self, CounterBench.self, SupportBench.self,
        ])
}
