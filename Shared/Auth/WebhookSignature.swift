import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import SyncModels

/// The signature on a webhook: `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`.
public enum WebhookSignature {
    public static func header(secret: String, timestamp: Int64, body: [UInt8]) -> String {
        "t=\(timestamp),v1=" + Hex.string(mac(secret: secret, timestamp: timestamp, body: body))
    }

    /// Checks a header against the body in constant time (a receiver should also refuse
    /// old timestamps).
    public static func isValid(_ header: String, secret: String, body: [UInt8]) -> Bool {
        let parts = Dictionary(header.split(separator: ",").compactMap { part -> (String, String)? in
            let pair = part.split(separator: "=", maxSplits: 1)
            return pair.count == 2 ? (String(pair[0]), String(pair[1])) : nil
        }, uniquingKeysWith: { first, _ in first })
        guard let t = parts["t"].flatMap(Int64.init), let given = parts["v1"].flatMap(Hex.bytes) else { return false }
        return HMAC<SHA256>.isValidAuthenticationCode(
            given, authenticating: Array("\(t).".utf8) + body, using: SymmetricKey(data: Array(secret.utf8)))
    }

    private static func mac(secret: String, timestamp: Int64, body: [UInt8]) -> HMAC<SHA256>.MAC {
        HMAC<SHA256>.authenticationCode(for: Array("\(timestamp).".utf8) + body, using: SymmetricKey(data: Array(secret.utf8)))
    }
}

extension HTTPClientRequest {
    /// A signed `POST` of a JSON `body` to `url`, as webhooks and hooks are sent:
    /// `Syncline-Signature` over the body with `secret`, stamped now.
    public static func signedPost(to url: String, body: [UInt8], secret: String) -> HTTPClientRequest {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(
            name: "Syncline-Signature",
            value: WebhookSignature.header(secret: secret, timestamp: Int64(Date().timeIntervalSince1970), body: body))
        request.body = .bytes(ByteBuffer(bytes: body))
        return request
    }
}
