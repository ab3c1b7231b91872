import Foundation
import HTTPSupport
import Hummingbird
import ServiceSupport
import SyncModels

extension Request {
    /// An integer query parameter within `range`; absent gives `fallback`, anything else
    /// (an empty value included) is a 400 naming the parameter and its range.
    func integerParameter(_ name: String, in range: ClosedRange<Int>, default fallback: Int) throws -> Int {
        guard let text = uri.queryParameters[Substring(name)].map(String.init) else { return fallback }
        guard let value = Int(text), range.contains(value) else {
            throw APIError.badRequest("\(name) must be \(range.lowerBound) to \(range.upperBound).")
        }
        return value
    }

    /// A cursor or checkpoint query parameter, 1–18 decimal digits; absent gives nil,
    /// anything else is a 400 saying where such a value comes from (`source`).
    func cursorParameter(_ name: String, from source: String) throws -> Int64? {
        guard let text = uri.queryParameters[Substring(name)] else { return nil }
        guard (1...18).contains(text.utf8.count), text.utf8.allSatisfy({ (48...57).contains($0) }), let value = Int64(text) else {
            throw APIError.badRequest("\(name) must be a cursor from \(source).")
        }
        return value
    }
}

extension Request {
    /// The body as a JSON object: 400 when it is not JSON, 422 when it is not an object.
    func jsonObject(upTo limit: Int = 64 * 1024) async throws -> [String: JSONValue] {
        let body = try await self.body.collect(upTo: limit)
        guard let root = try? JSONParser.parse(Data(buffer: body)) else { throw APIError.badRequest("The request body is not valid JSON.") }
        guard let object = root.objectValue else { throw APIError.unprocessable("The body must be a JSON object.") }
        return object
    }

    /// A free-text query parameter (a search, a tag) of 1 to `maxLength` characters
    /// (Unicode scalars, as JSON Schema counts them):
    /// percent-decoded with `+` as a space, as browsers' forms send it. Invalid UTF-8 or
    /// control characters are a 400, never text altered on its way to the database.
    func textParameter(_ name: String, maxLength: Int) throws -> String? {
        guard let query = uri.query else { return nil }
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts[0] == name else { continue }
            let raw = parts.count > 1 ? parts[1] : ""
            guard let bytes = PercentEncoding.decoded(raw, plusAsSpace: true), let text = String(validating: bytes, as: UTF8.self),
                  (1...maxLength).contains(text.unicodeScalars.count), Names.isPlainText(text)
            else {
                throw APIError.badRequest("\(name) must be 1 to \(maxLength) characters of text.")
            }
            return text
        }
        return nil
    }

    /// A data query in the body (the data API's and the support console's record browser):
    /// 400 when it is not JSON, 422 naming the pointer of its first error.
    func dataQuery() async throws -> DataQuery {
        let body = try await body.collect(upTo: 64 * 1024)
        guard let json = try? JSONParser.parse(Data(buffer: body)) else { throw APIError.badRequest("The request body is not valid JSON.") }
        do {
            return try DataQuery(json: json)
        } catch {
            var problem = APIError.unprocessable("The query was refused: \(error.message).")
            problem.pointer = error.pointer
            throw problem
        }
    }
}
