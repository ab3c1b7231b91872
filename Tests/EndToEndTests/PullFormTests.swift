import Foundation
import SyncModels
import Testing
import TestSupport

/// What a pull page carries on the wire: the compact form reads as the full form's records
/// less who and when wrote them last, and answers with records are gzipped for a client
/// that takes it — pull pages, job results, public reads — and byte for byte the same
/// JSON once decompressed (URLSession decompresses, as a browser does).
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct PullFormTests {
    @Test func aCompactPageIsTheFullPagesRecordsAndAnswersWithRecordsAreGzipped() async throws {
        try await Stack.with { stack in
            let api = stack.client
            let token = await E2E.token("forms-\(UUID().uuidString.prefix(6))")
            let (mac, phone) = (try await api.registerDevice(token, name: "mac"), try await api.registerDevice(token, name: "phone"))
            let publicID = "forms-\(UUID().uuidString.prefix(8).lowercased())"
            var jobs: [String] = []
            for (device, ops) in [
                (mac, (0..<40).map { n in
                    ["op_id": newOpID(), "type": "upsert", "collection": "tasks", "id": "t\(n)", "data": ["title": "Task \(n)", "done": n % 2 == 0]]
                } as [[String: Any]]),
                (phone, [
                    ["op_id": newOpID(), "type": "delete", "collection": "tasks", "id": "t1"],
                    ["op_id": newOpID(), "type": "publish", "collection": "tasks", "id": "t2", "public_id": publicID, "can_fork": true],
                    ["op_id": newOpID(), "type": "upsert", "collection": "tasks", "id": "t3", "data": ["title": String(repeating: "long ", count: 400)]],
                    ["op_id": newOpID(), "type": "publish", "collection": "tasks", "id": "t3", "public_id": publicID + "-long", "can_fork": false],
                ]),
            ] {
                let answer = try await api.push(token, device: device, ops: ops)
                jobs.append(try #require(answer.json["job_id"] as? String, "\(answer.status) \(answer.text)"))
            }
            for job in jobs { #expect(try await api.awaitJob(token, job)["status"] as? String == "succeeded") }

            func page(_ query: String, encoding: String) async throws -> (HTTPResult, PullPage) {
                let answer = try await api.request("GET", "/v1/sync/pull?limit=100\(query)", token: token, headers: ["Accept-Encoding": encoding])
                #expect(answer.status == 200, "\(answer.text)")
                return (answer, try #require(PullPage(json: try JSONParser.parse(Array(answer.body))), "\(answer.text)"))
            }
            let (full, fullPage) = try await page("", encoding: "identity")
            let (zipped, _) = try await page("&form=full", encoding: "gzip")
            let (compact, compactPage) = try await page("&form=compact", encoding: "gzip")
            let (plainCompact, _) = try await page("&form=compact", encoding: "gzip;q=0, identity")

            // The two forms: the same records, the compact one without who and when.
            #expect(fullPage.changes.count == 40 && fullPage.changes.allSatisfy { $0.updatedBy != nil })
            var held = fullPage
            for index in held.changes.indices { (held.changes[index].updatedAt, held.changes[index].updatedBy) = (nil, nil) }
            #expect(compactPage == held)
            #expect(Set(compactPage.changes.compactMap(\.hlc).map { String($0.dropFirst(HLC.nodeOffset)) }) == [mac, phone])
            #expect(compact.body.count * 2 < full.body.count, "\(compact.body.count) vs \(full.body.count) bytes")

            // Compression: asked for, taken; refused, not; the same bytes either way.
            #expect(full.header("Content-Encoding") == nil && plainCompact.header("Content-Encoding") == nil)
            #expect(zipped.header("Content-Encoding") == "gzip" && compact.header("Content-Encoding") == "gzip")
            #expect(zipped.body == full.body && compact.body == plainCompact.body)
            #expect(full.header("Vary") == "Accept-Encoding")
            let metrics = try await BatchingTests.metrics(of: stack.gateway)
            let before = BatchingTests.metric("syncline_http_compressed_bytes_total{stage=\"before\"}", in: metrics)
            let after = BatchingTests.metric("syncline_http_compressed_bytes_total{stage=\"after\"}", in: metrics)
            #expect(before >= Double(full.body.count + compact.body.count) && after > 0 && after * 4 < before, "\(before) → \(after)")

            // A job's results, and public reads, over 1 KiB: gzipped; a small answer is not.
            let job = try await api.request("GET", "/v1/sync/jobs/\(jobs[0])", token: token, headers: ["Accept-Encoding": "gzip"])
            #expect(job.header("Content-Encoding") == "gzip" && (job.json["results"] as? [Any])?.count == 40)
            let long = try await api.request("GET", "/v1/public/\(publicID)-long", headers: ["Accept-Encoding": "gzip"])
            #expect(long.status == 200 && long.header("Content-Encoding") == "gzip" && long.header("ETag") != nil)
            let short = try await api.request("GET", "/v1/public/\(publicID)", headers: ["Accept-Encoding": "gzip"])
            #expect(short.status == 200 && short.header("Content-Encoding") == nil && short.header("Vary") == "Accept-Encoding")
            let list = try await api.request("GET", "/v1/public?collection=tasks&limit=100", headers: ["Accept-Encoding": "*"])
            #expect(list.status == 200 && (list.json["items"] as? [Any])?.isEmpty == false)

            // A form the gateway does not know is a clear 400.
            let bad = try await api.request("GET", "/v1/sync/pull?form=tiny", token: token)
            #expect(bad.status == 400 && bad.text.contains("form must be full or compact"), "\(bad.text)")
        }
    }
}
