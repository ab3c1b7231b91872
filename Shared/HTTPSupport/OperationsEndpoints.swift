import Foundation
import Hummingbird
import ServiceLifecycle
import ServiceSupport

/// `/healthz` (alive), `/readyz` (every dependency reachable) and `/metrics`, the same in
/// every long-running service.
public enum OperationsEndpoints {
    public static func register<Context: RequestContext>(
        on router: Router<Context>,
        readiness: @escaping @Sendable () async -> [String: Bool]
    ) {
        router.get("/healthz") { _, _ in
            Response(status: .ok, headers: [.contentType: "application/json"],
                     body: .init(byteBuffer: ByteBuffer(string: #"{"status":"ok"}"#)))
        }
        router.get("/readyz") { _, _ in
            let checks = await readiness()
            let body = "{" + checks.sorted { $0.key < $1.key }
                .map { "\"\($0.key)\":\"\($0.value ? "up" : "down")\"" }.joined(separator: ",") + "}"
            return Response(
                status: checks.values.allSatisfy { $0 } ? .ok : .serviceUnavailable,
                headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: body)))
        }
        router.get("/metrics") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4"],
                body: .init(byteBuffer: ByteBuffer(string: Observability.exposition())))
        }
    }
}
