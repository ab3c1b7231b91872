// swift-tools-version:6.1
import PackageDescription

let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "Syncline",
    // The client library's floor; the services run on Linux.
    platforms: [.macOS(.v13), .iOS(.v16)],
    products: [
        .executable(name: "gateway", targets: ["GatewayCommand"]),
        .executable(name: "worker", targets: ["WorkerCommand"]),
        .executable(name: "fanout", targets: ["FanoutCommand"]),
        .executable(name: "purge", targets: ["PurgeCommand"]),
        .executable(name: "syncctl", targets: ["SyncctlCommand"]),
        .executable(name: "syncline-bench", targets: ["SynclineBenchCommand"]),
        // The container image's one binary; the five commands above are links to it.
        .executable(name: "syncline", targets: ["SynclineCommand"]),
        .library(name: "SynclineClient", targets: ["SynclineClient"]),
        // SynclineClient with live models for SwiftUI (and its environment value).
        .library(name: "SynclineUI", targets: ["SynclineUI"]),
        // For an app's tests: a Syncline server in the test process.
        .library(name: "SynclineTesting", targets: ["SynclineTesting"]),
    ],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "5.0.1"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.8.0"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
        // OTLP over HTTP only: the gRPC exporter would build gRPC and HTTP/2 for nothing.
        .package(url: "https://github.com/swift-otel/swift-otel.git", from: "1.6.0", traits: ["OTLPHTTP"]),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        // gzip for answers that carry records (zlib).
        .package(url: "https://github.com/adam-fowler/compress-nio.git", from: "1.5.0"),
    ],
    targets: [
        // Wire models, validation, HLC and the merge rules: pure, no I/O.
        .target(name: "SyncModels", path: "Shared/SyncModels", swiftSettings: strict),
        // The Swift client's URLSession calls, whose caller may be cancelled without
        // cancelling the request (which can deadlock on Linux). The server uses AsyncHTTPClient.
        .target(name: "URLSessionCancellation", path: "Shared/URLSessionCancellation", swiftSettings: strict),
        // The Swift package an offline-first app drops in: local store, outbox, sync.
        .target(
            name: "SynclineClient",
            dependencies: [
                "SyncModels", "URLSessionCancellation", .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Shared/SynclineClient", swiftSettings: strict),
        // Live queries and records for SwiftUI: plain models (tested on Linux) and, where
        // SwiftUI exists, its environment value and property wrapper.
        .target(name: "SynclineUI", dependencies: ["SynclineClient"], path: "Shared/SynclineUI", swiftSettings: strict),
        // A fake server for apps' tests: the protocol on 127.0.0.1, over memory, by the
        // server's own rules.
        .target(
            name: "SynclineTesting",
            dependencies: [
                "SyncModels", "SynclineClient",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            path: "Shared/SynclineTesting", swiftSettings: strict),
        // HS256 JWTs, minted by syncctl and verified by the services.
        .target(
            name: "Auth",
            dependencies: [
                "SyncModels",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            path: "Shared/Auth", swiftSettings: strict),
        .systemLibrary(
            name: "CLibPQ", path: "Shared/CLibPQ", pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"])]),
        .systemLibrary(
            name: "CRabbitMQ", path: "Shared/CRabbitMQ", pkgConfig: "librabbitmq",
            providers: [.apt(["librabbitmq-dev"])]),
        // libpq bridge: pooled connections on an owned thread pool, typed errors.
        .target(
            name: "PQBridge",
            dependencies: [
                "CLibPQ",
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Shared/PQBridge", swiftSettings: strict),
        // rabbitmq-c bridge: one thread owns each connection; confirms, consumer, reconnect.
        .target(
            name: "AMQPBridge",
            dependencies: [
                "CRabbitMQ",
                "SyncModels",
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            path: "Shared/AMQPBridge", swiftSettings: strict),
        // Migrations and the SQL of the sync domain.
        .target(
            name: "Persistence",
            dependencies: [
                "SyncModels", "PQBridge", .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            path: "Shared/Persistence", swiftSettings: strict),
        // Files' bytes: the PostgreSQL and directory stores, taking files in, removing garbage.
        .target(
            name: "BlobStorage",
            dependencies: [
                "SyncModels", "PQBridge", "Persistence", "ServiceSupport",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            path: "Shared/BlobStorage", swiftSettings: strict),
        // What every executable shares: configuration, logs and metrics, the failure policy
        // of a job, rate limits, lifecycle helpers. No HTTP server.
        .target(
            name: "ServiceSupport",
            dependencies: [
                "SyncModels", "Auth", "PQBridge", "AMQPBridge",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            path: "Shared/ServiceSupport", swiftSettings: strict),
        // Traces out over OTLP/HTTP, configured by the standard OTEL_* variables: for the
        // services only (the client library and syncctl never link it).
        .target(
            name: "Telemetry",
            dependencies: [
                "ServiceSupport",
                .product(name: "OTel", package: "swift-otel"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Shared/Telemetry", swiftSettings: strict),
        // Syncline's queues, exchanges and messages on the broker.
        .target(
            name: "BrokerTopology",
            dependencies: [
                "SyncModels", "Auth", "AMQPBridge",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Shared/BrokerTopology", swiftSettings: strict),
        // For the services that serve HTTP: problem+json errors, authentication, CORS, the
        // 405 table, health and metrics endpoints.
        .target(
            name: "HTTPSupport",
            dependencies: [
                "SyncModels", "Auth", "PQBridge", "AMQPBridge", "ServiceSupport",
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "CompressNIO", package: "compress-nio"),
            ],
            path: "Shared/HTTPSupport", swiftSettings: strict),
        // Operators' tools over dead letters, queues and the app's rules, shared by the gateway's admin API and syncctl.
        .target(
            name: "Operations",
            dependencies: ["SyncModels", "BrokerTopology", "Auth", "PQBridge", "AMQPBridge", "Persistence", "ServiceSupport",
                           "BlobStorage", .product(name: "Logging", package: "swift-log"), .product(name: "Yams", package: "Yams")],
            path: "Shared/Operations", swiftSettings: strict),
        .target(
            name: "Gateway",
            dependencies: [
                "SyncModels", "HTTPSupport", "BrokerTopology", "Auth", "PQBridge", "AMQPBridge", "Persistence", "ServiceSupport", "Operations",
                "BlobStorage",
                "Telemetry", .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Services/Gateway",
            resources: [.copy("openapi.yaml"), .copy("admin.html"), .copy("support.html")],
            swiftSettings: strict),
        .target(
            name: "Worker",
            dependencies: [
                "SyncModels", "HTTPSupport", "BrokerTopology", "PQBridge", "AMQPBridge", "Persistence", "ServiceSupport", "Auth",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                "Telemetry", .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Services/Worker", swiftSettings: strict),
        .target(
            name: "Fanout",
            dependencies: [
                "SyncModels", "HTTPSupport", "BrokerTopology", "Auth", "PQBridge", "AMQPBridge", "Persistence", "ServiceSupport",
                "Telemetry", .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Services/Fanout", swiftSettings: strict),
        .target(
            name: "Purge",
            dependencies: [
                "HTTPSupport", "BrokerTopology", "PQBridge", "AMQPBridge", "Persistence", "ServiceSupport", "Operations", "BlobStorage",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Services/Purge", swiftSettings: strict),
        .target(
            name: "Syncctl",
            dependencies: [
                "SyncModels", "BrokerTopology", "Auth", "PQBridge", "AMQPBridge", "Persistence", "ServiceSupport", "Operations",
                "BlobStorage",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Services/Syncctl", swiftSettings: strict),
        // Load generators and measurements: a command of their own, apart from the operators'.
        .target(
            name: "Bench",
            dependencies: [
                "SyncModels", "Auth", "PQBridge", "Persistence", "ServiceSupport", "SynclineClient",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Services/Bench", swiftSettings: strict),
        // The executables: each runs one of the libraries above.
        .executableTarget(name: "GatewayCommand", dependencies: ["Gateway"], path: "Services/Commands/gateway", swiftSettings: strict),
        .executableTarget(name: "WorkerCommand", dependencies: ["Worker"], path: "Services/Commands/worker", swiftSettings: strict),
        .executableTarget(name: "FanoutCommand", dependencies: ["Fanout"], path: "Services/Commands/fanout", swiftSettings: strict),
        .executableTarget(name: "PurgeCommand", dependencies: ["Purge"], path: "Services/Commands/purge", swiftSettings: strict),
        .executableTarget(name: "SyncctlCommand", dependencies: ["Syncctl"], path: "Services/Commands/syncctl", swiftSettings: strict),
        .executableTarget(
            name: "SynclineBenchCommand", dependencies: ["Bench"], path: "Services/Commands/syncline-bench", swiftSettings: strict),
        .executableTarget(
            name: "SynclineCommand", dependencies: ["Gateway", "Worker", "Fanout", "Purge", "Syncctl"],
            path: "Services/Commands/syncline", swiftSettings: strict),
        // A device as a process of its own, for end-to-end tests that kill it.
        .executableTarget(
            name: "ClientProcess", dependencies: ["SynclineClient"], path: "Tests/ClientProcess", swiftSettings: strict),
        .target(name: "TestSupport", dependencies: ["Auth", "SyncModels"], path: "Tests/TestSupport", swiftSettings: strict),
        .testTarget(
            name: "UnitTests",
            dependencies: [
                "Telemetry", "SyncModels", "SynclineClient", "SynclineUI", "SynclineTesting", "Auth", "PQBridge", "AMQPBridge", "ServiceSupport", "HTTPSupport", "BrokerTopology",
                "Gateway", "Worker", "Fanout", "Persistence", "Operations", "TestSupport",
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "JWTKit", package: "jwt-kit"), .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "NIOEmbedded", package: "swift-nio"), .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
            ],
            path: "Tests/UnitTests", swiftSettings: strict),
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "SyncModels", "PQBridge", "AMQPBridge", "Persistence", "BlobStorage", "TestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            path: "Tests/IntegrationTests", swiftSettings: strict),
        // The gateway's routes in the test's own process (HummingbirdTesting), against the
        // real database and broker: no service process, so these start in milliseconds.
        .testTarget(
            name: "RouteTests",
            dependencies: [
                "Gateway", "ServiceSupport", "PQBridge", "Persistence", "SyncModels", "SynclineTesting", "TestSupport",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
            ],
            path: "Tests/RouteTests", swiftSettings: strict),
        .testTarget(
            name: "EndToEndTests",
            dependencies: [
                "SyncModels", "SynclineClient", "SynclineUI", "Auth", "PQBridge", "AMQPBridge", "ServiceSupport", "BrokerTopology", "TestSupport",
                "Gateway", "Worker", "Fanout",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "JWTKit", package: "jwt-kit"), .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ],
            path: "Tests/EndToEndTests", swiftSettings: strict),
    ]
)
