import AMQPBridge
import Foundation
import HTTPSupport
import Hummingbird
import PQBridge
import ServiceSupport

/// `/healthz`, `/readyz`, `/metrics` and `/openapi.yaml`.
struct OperationsRoutes: Sendable {
    let pool: PGPool
    let publisher: AMQPPublisher
    let openAPIDocument: String

    func register(on router: Router<GatewayRequestContext>) {
        let pool = self.pool, publisher = self.publisher
        OperationsEndpoints.register(on: router) {
            async let database = pool.ping()
            async let broker = publisher.ping()
            return ["database": await database, "broker": await broker]
        }
        let document = openAPIDocument
        router.get("/openapi.yaml") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "application/yaml"],
                body: .init(byteBuffer: ByteBuffer(string: document)))
        }
    }
}
