import Auth
import Foundation
import Testing
import TestSupport

/// Publish / unpublish and the public endpoints.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct PublicContentTests {
    static func token(_ user: String, name: String?) async -> String {
        await E2E.token(user, name: name)
    }

    /// The sailing app's flow: publish a checklist, read it publicly (views rise, ETag
    /// works, the author is the display name and the user id never shows), unpublish → 404.
    @Test func publishReadUnpublish() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let user = "skipper-\(UUID().uuidString.prefix(6))"
            let token = await Self.token(user, name: "Skipper Jo")
            let device = try await api.registerDevice(token)
            let publicID = "pre-charter-\(UUID().uuidString.prefix(8).lowercased())"
            let push = try await api.push(token, device: device, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "checklists", "id": "c9",
                 "data": ["title": "Pre-charter safety", "items": ["life jackets", "flares"]]],
                ["op_id": newOpID(), "type": "publish", "collection": "checklists", "id": "c9", "public_id": publicID, "can_fork": true],
            ])
            let job = try await api.awaitJob(token, try #require(push.json["job_id"] as? String))
            #expect((job["results"] as? [[String: Any]])?.map { $0["status"] as? String } == ["applied", "applied"])

            let listing = try await api.request("GET", "/v1/public?collection=checklists&limit=100")
            #expect(listing.status == 200)
            let item = (listing.json["items"] as? [[String: Any]])?.first { $0["public_id"] as? String == publicID }
            #expect(item?["title"] as? String == "Pre-charter safety")
            #expect(item?["author"] as? String == "Skipper Jo")
            #expect(!listing.text.contains(user), "a user id is never shown publicly")

            var counts: [Int] = []
            var etag = ""
            for _ in 0..<3 {
                let read = try await api.request("GET", "/v1/public/\(publicID)")
                #expect(read.status == 200)
                #expect(read.json["can_fork"] as? Bool == true)
                #expect((read.json["data"] as? [String: Any])?["title"] as? String == "Pre-charter safety")
                #expect(!read.text.contains(user))
                counts.append(read.json["view_count"] as? Int ?? -1)
                etag = read.header("ETag") ?? ""
            }
            #expect(counts == [1, 1, 1], "one reader's reads within the hour count one view: \(counts)")
            #expect(!etag.isEmpty)
            #expect(try await api.request("GET", "/v1/public/\(publicID)", headers: ["If-None-Match": etag]).status == 304)
            // Counts reach PostgreSQL in batches (about once a second).
            _ = try await eventually(within: 5, "views flushed") {
                let listed = try await api.request("GET", "/v1/public?collection=checklists&limit=100").json["items"] as? [[String: Any]]
                return (listed?.first { $0["public_id"] as? String == publicID }?["view_count"] as? Int ?? 0) == 1 ? true : nil
            }

            let unpublish = try await api.push(token, device: device, ops: [
                ["op_id": newOpID(), "type": "unpublish", "collection": "checklists", "id": "c9"],
            ])
            _ = try await api.awaitJob(token, try #require(unpublish.json["job_id"] as? String))
            #expect(try await api.request("GET", "/v1/public/\(publicID)").status == 404)
            let after = try await api.request("GET", "/v1/public?collection=checklists&limit=100").json["items"] as? [[String: Any]]
            #expect(after?.contains { $0["public_id"] as? String == publicID } == false)

            // Published again, then deleted: never listed while deleted.
            let again = try await api.push(token, device: device, ops: [
                ["op_id": newOpID(), "type": "publish", "collection": "checklists", "id": "c9", "public_id": publicID],
                ["op_id": newOpID(), "type": "delete", "collection": "checklists", "id": "c9"],
            ])
            _ = try await api.awaitJob(token, try #require(again.json["job_id"] as? String))
            #expect(try await api.request("GET", "/v1/public/\(publicID)").status == 404)
        }
    }

    /// Two users race for one public id, several times: exactly one wins each time, the
    /// other's op is rejected with `public_id_taken`.
    @Test func twoUsersRaceForOnePublicID() async throws {
        try await InProcessStack.with(workers: 2) { stack in
            let api = stack.client
            let users = try await (0..<2).asyncMap { i -> (String, String) in
                let token = await Self.token("racer-\(i)-\(UUID().uuidString.prefix(6))", name: "Racer \(i)")
                return (token, try await api.registerDevice(token))
            }
            for round in 0..<5 {
                let publicID = "contested-\(round)-\(UUID().uuidString.prefix(6).lowercased())"
                func ops() -> [[String: Any]] {
                    [["op_id": newOpID(), "type": "upsert", "collection": "guides", "id": "g\(round)", "data": ["title": "Guide"]],
                     ["op_id": newOpID(), "type": "publish", "collection": "guides", "id": "g\(round)", "public_id": publicID]]
                }
                async let first = api.push(users[0].0, device: users[0].1, ops: ops())
                async let second = api.push(users[1].0, device: users[1].1, ops: ops())
                let jobs = try await [first, second].enumerated().map { ($0.offset, try #require($0.element.json["job_id"] as? String)) }
                var statuses: [String] = []
                for (index, job) in jobs {
                    let view = try await api.awaitJob(users[index].0, job)
                    let result = (view["results"] as? [[String: Any]])?.last
                    statuses.append(result?["status"] as? String ?? "?")
                    if result?["status"] as? String == "rejected" { #expect(result?["reason"] as? String == "public_id_taken") }
                }
                #expect(statuses.sorted() == ["applied", "rejected"], "round \(round): \(statuses)")
                #expect(try await api.request("GET", "/v1/public/\(publicID)").status == 200)
            }
        }
    }
}

extension Sequence {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var results: [T] = []
        for element in self { results.append(try await transform(element)) }
        return results
    }
}
