import Hummingbird
import ServiceSupport

#if canImport(Glibc)
import Glibc
#endif

/// The `gateway` command (its own executable, or `syncline gateway` in the container image).
public enum GatewayMain {
    public static func run(arguments: [String]) async {
        let (configuration, settings) = Configuration.forService(
            "gateway", defaultPort: 8080, checksTokens: true, settings: GatewaySettings.init)
        let logger = Observability.bootstrap(service: "gateway", level: configuration.logLevel)
        keepFileBuffersOutOfTheHeap()
        await ServiceExit.run("gateway", port: configuration.port) {
            let app = try await buildApplication(configuration: configuration, settings: settings, logger: logger)
            try await app.runService()
        }
    }

    /// Allocations of a download's piece (`BlobChunking.servingBytes`) and up are mapped
    /// and unmapped on their own, never carved from malloc's heaps. Left to glibc's sliding
    /// threshold, pieces passing through hundreds of downloads at once fragmented the heaps,
    /// which kept the memory after the downloads ended (measured, 200 readers of a 30 MB
    /// file that read nothing: +359 MB while held and 397 MB kept after they closed,
    /// against +46 MB and back to within 9 MB of the start with this).
    static func keepFileBuffersOutOfTheHeap() {
        #if canImport(Glibc)
        // `mallopt` is glibc's (malloc.h, which the Glibc module leaves out).
        typealias MallOpt = @convention(c) (Int32, Int32) -> Int32
        let mmapThreshold: Int32 = -3  // M_MMAP_THRESHOLD
        guard let symbol = dlsym(nil, "mallopt") else { return }
        _ = unsafeBitCast(symbol, to: MallOpt.self)(mmapThreshold, 32 * 1024)
        #endif
    }
}
