import CompressNIO
import Foundation
import HTTPTypes
import Hummingbird
import Metrics
import NIOCore
import SyncModels

/// gzip for the answers that carry records — pull pages, job results, public reads — when
/// the request's `Accept-Encoding` takes it. Answers under `minimumBytes` go as they are: a
/// gzip frame costs more than it saves on them. Each compressed answer is one zlib stream
/// at `level` (1 by default, chosen by measurement: see docs/BENCHMARKS.md).
public struct ResponseCompression: Sendable {
    public let gzip: CompressionAlgorithm
    public let minimumBytes: Int

    public init(level: ZlibConfiguration.CompressionLevel = .fastestCompression, minimumBytes: Int = 1024) {
        gzip = .gzip(configuration: .init(compressionLevel: level))
        self.minimumBytes = minimumBytes
    }

    /// A JSON answer of `body`, gzipped when `request` takes gzip and the body is worth it.
    /// `Vary: Accept-Encoding` either way, so that a cache keeps the two apart.
    public func json(
        _ body: ByteBuffer, for request: Request, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]
    ) -> Response {
        var headers = headers
        headers[.contentType] = "application/json"
        headers[.vary] = "Accept-Encoding"
        var body = body
        let size = body.readableBytes
        if size >= minimumBytes, Self.takesGzip(request.headers[values: .acceptEncoding]),
           let compressed = try? body.compress(with: gzip)
        {
            headers[.contentEncoding] = "gzip"
            Self.bytes.increment(by: size)
            Self.sent.increment(by: compressed.readableBytes)
            return Response(status: status, headers: headers, body: .init(byteBuffer: compressed))
        }
        return Response(status: status, headers: headers, body: .init(byteBuffer: body))
    }

    /// A value as a JSON answer, gzipped as `json(_:for:)` says.
    public func json<T: Encodable>(
        _ value: T, for request: Request, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]
    ) throws -> Response {
        json(ByteBuffer(bytes: try JSONCoding.encode(value)), for: request, status: status, headers: headers)
    }

    /// Whether an `Accept-Encoding` (its values, each a comma-separated list) takes gzip:
    /// `gzip` or `*` with a weight above zero, and `gzip` not refused by name.
    static func takesGzip(_ values: [String]) -> Bool {
        var weights: [String: Bool] = [:]
        for value in values {
            for item in value.split(separator: ",") {
                let parts = item.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
                guard let coding = parts.first, !coding.isEmpty else { continue }
                let quality = parts.dropFirst().first { $0.hasPrefix("q=") }.flatMap { Double($0.dropFirst(2)) } ?? 1
                weights[coding] = quality > 0
            }
        }
        return weights["gzip"] ?? weights["x-gzip"] ?? weights["*"] ?? false
    }

    /// Bytes of the answers compressed, before and after.
    private static let bytes = Counter(label: "syncline_http_compressed_bytes_total", dimensions: [("stage", "before")])
    private static let sent = Counter(label: "syncline_http_compressed_bytes_total", dimensions: [("stage", "after")])
}
