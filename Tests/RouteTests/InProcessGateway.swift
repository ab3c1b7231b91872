import Foundation
@testable import Gateway
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import ServiceSupport
import TestSupport

/// The gateway in the test's own process: its router, middleware and services as
/// `gateway` builds them, on the test database and broker, with each request handed to the
/// router directly (HummingbirdTesting) rather than over a socket.
///
/// What needs the real server stays in the end-to-end tests: the HTTP parser's answers,
/// connection timeouts, transfer guards, and anything that needs a worker or fanout.
enum InProcessGateway {
    static let environment = ProcessInfo.processInfo.environment
    static var enabled: Bool { environment["DATABASE_URL"] != nil && environment["AMQP_URL"] != nil }

    /// `TestSettings.services`, and a small pool, since tests run side by side.
    static let defaults = TestSettings.services.merging(["DATABASE_POOL_SIZE": "2"]) { $1 }

    static let logger: Logger = {
        var logger = Logger(label: "routes")
        logger.logLevel = .warning
        return logger
    }()

    /// Runs `body` with a client of a gateway built from the environment, `settings` over it.
    static func with<T: Sendable>(
        _ settings: [String: String] = [:], _ body: @escaping @Sendable (APIClient) async throws -> T
    ) async throws -> T {
        let environment = environment.merging(defaults) { $1 }.merging(settings) { $1 }
        let configuration = try Configuration.fromEnvironment(environment)
        let gatewaySettings = try GatewaySettings(EnvironmentReader(environment))
        let app = try await buildApplication(configuration: configuration, settings: gatewaySettings, logger: logger)
        return try await app.test(.router) { client in
            try await body(APIClient(base: "in-process") { method, path, headers, body in
                var fields = HTTPFields()
                for (name, value) in headers {
                    guard let name = HTTPField.Name(name) else { continue }
                    fields.append(HTTPField(name: name, value: value))
                }
                let response = try await client.execute(
                    uri: path, method: HTTPRequest.Method(method)!, headers: fields, body: body.map { ByteBuffer(bytes: $0) })
                var answer: [String: String] = [:]
                for field in response.headers {
                    answer[field.name.canonicalName] = answer[field.name.canonicalName].map { "\($0), \(field.value)" } ?? field.value
                }
                return HTTPResult(status: response.status.code, headers: answer, body: Data(response.body.readableBytesView))
            })
        }
    }
}
