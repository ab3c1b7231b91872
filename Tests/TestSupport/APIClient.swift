import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A fresh op id.
public func newOpID() -> String { UUID().uuidString.lowercased() }

/// What the gateway answered.
public struct HTTPResult: Sendable {
    public let status: Int
    public let headers: [String: String]
    public let body: Data

    public init(status: Int, headers: [String: String], body: Data) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    public var json: [String: Any] { (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] ?? [:] }
    public var text: String { String(decoding: body, as: UTF8.self) }
    public func header(_ name: String) -> String? {
        headers.first { $0.key.lowercased() == name.lowercased() }?.value
    }
}

/// The gateway's HTTP API as the tests call it: over HTTP to a running gateway (`base`), or
/// handed to a router in the test's own process (`transport`).
public struct APIClient: Sendable {
    /// Sends one request: method, path and query, header fields, body.
    public typealias Transport = @Sendable (String, String, [String: String], Data?) async throws -> HTTPResult

    /// The gateway's URL, such as `http://127.0.0.1:8080`.
    public let base: String
    private let transport: Transport

    public init(base: String) {
        self.base = base
        transport = { method, path, headers, body in
            var request = URLRequest(url: URL(string: base + path)!)
            request.httpMethod = method
            request.httpBody = body
            request.timeoutInterval = 30
            for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
            let (data, response) = try await URLSession.shared.data(for: request)
            let http = response as! HTTPURLResponse
            var fields: [String: String] = [:]
            for (key, value) in http.allHeaderFields { fields["\(key)"] = "\(value)" }
            return HTTPResult(status: http.statusCode, headers: fields, body: data)
        }
    }

    public init(base: String, transport: @escaping Transport) {
        self.base = base
        self.transport = transport
    }

    public func request(
        _ method: String, _ path: String, token: String? = nil, body: Data? = nil, headers: [String: String] = [:]
    ) async throws -> HTTPResult {
        var fields: [String: String] = [:]
        if let token { fields["Authorization"] = "Bearer \(token)" }
        if body != nil { fields["Content-Type"] = "application/json" }
        for (name, value) in headers {
            fields = fields.filter { $0.key.lowercased() != name.lowercased() }
            fields[name] = value
        }
        return try await transport(method, path, fields, body)
    }

    public func json(_ method: String, _ path: String, token: String?, _ object: Any, headers: [String: String] = [:]) async throws -> HTTPResult {
        try await request(method, path, token: token, body: try JSONSerialization.data(withJSONObject: object), headers: headers)
    }

    public func registerDevice(_ token: String, name: String = "device") async throws -> String {
        let result = try await json("POST", "/v1/devices", token: token, ["name": name, "platform": "ios"])
        guard result.status == 201, let id = result.json["device_id"] as? String else {
            throw Failure(description: "device registration answered \(result.status): \(result.text)")
        }
        return id
    }

    public func push(_ token: String, device: String, ops: [[String: Any]], headers: [String: String] = [:]) async throws -> HTTPResult {
        try await json("POST", "/v1/sync/push", token: token, ["device_id": device, "ops": ops], headers: headers)
    }

    /// Waits until the job is terminal and returns its view.
    public func awaitJob(_ token: String, _ jobID: String, within seconds: Double = 30) async throws -> [String: Any] {
        try await eventually(within: seconds, "job \(jobID)") {
            let job = try await request("GET", "/v1/sync/jobs/\(jobID)", token: token).json
            let status = job["status"] as? String
            return ["succeeded", "dead", "discarded"].contains(status ?? "") ? job : nil
        }
    }

    /// Pulls from `since` until has_more is false; returns every change and the final cursor.
    public func pullAll(
        _ token: String, since: String? = nil, limit: Int = 7, space: String? = nil, minCursor: String? = nil
    ) async throws -> (changes: [[String: Any]], cursor: String) {
        var cursor = since
        var changes: [[String: Any]] = []
        while true {
            let query = "/v1/sync/pull?limit=\(limit)" + (space.map { "&space_id=\($0)" } ?? "") + (cursor.map { "&since=\($0)" } ?? "")
                + (minCursor.map { "&min_cursor=\($0)" } ?? "")
            let page = try await request("GET", query, token: token)
            guard page.status == 200 else { throw Failure(description: "pull answered \(page.status): \(page.text)") }
            let json = page.json
            changes += json["changes"] as? [[String: Any]] ?? []
            cursor = json["cursor"] as? String
            if json["has_more"] as? Bool != true { return (changes, cursor ?? "0") }
        }
    }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }
}
