import Foundation
import Testing
import TestSupport

/// Input the gateway refuses with a clear 4xx problem, and changes nothing for.
@Suite(.timeLimit(.minutes(1)), .enabled(if: InProcessGateway.enabled, "needs DATABASE_URL and AMQP_URL"))
struct RefusedInputTests {
    @Test func textThatPostgreSQLWouldAlterIsRefused() async throws {
        try await InProcessGateway.with { api in
            let user = "nul-\(UUID().uuidString.prefix(6))"
            let token = await Tokens.make(user)
            let device = try await api.registerDevice(token)
            let nulData = #"{"device_id":"\#(device)","ops":[{"op_id":"\#(newOpID())","type":"upsert","collection":"notes","id":"a","data":{"t":"ok"}},{"op_id":"\#(newOpID())","type":"upsert","collection":"notes","id":"b","data":{"t":"a\u0000b"}}]}"#
            let nul = try await api.request("POST", "/v1/sync/push", token: token, body: Data(nulData.utf8))
            #expect(nul.status == 422 && nul.json["op_index"] as? Int == 1 && nul.json["pointer"] as? String == "/ops/1/data",
                    "\(nul.status) \(nul.text)")
            var invalid = Data(#"{"device_id":"\#(device)","ops":[{"op_id":"\#(newOpID())","type":"upsert","collection":"notes","id":"c","data":{"t":""#.utf8)
            invalid.append(contentsOf: [0xC3, 0x28])
            invalid.append(contentsOf: Array(#""}}]}"#.utf8))
            let badUTF8 = try await api.request("POST", "/v1/sync/push", token: token, body: invalid)
            #expect(badUTF8.status == 400, "\(badUTF8.status) \(badUTF8.text)")
            let badName = try await api.request("POST", "/v1/devices", token: token, body: Data(#"{"name":"a\u0000b","platform":"ios"}"#.utf8))
            #expect(badName.status == 422)
            let badPlatform = try await api.request("POST", "/v1/devices", token: token, body: Data(#"{"name":"ok","platform":"i\u0000os"}"#.utf8))
            #expect(badPlatform.status == 422)
            // Nothing was created: no job, one device.
            #expect(try await api.pullAll(token).changes.isEmpty)
            #expect((try await api.request("GET", "/v1/devices", token: token).json["items"] as? [Any])?.count == 1)
        }
    }

    @Test func adminFiltersRefuseImpossibleTimesAndKeepKeys() async throws {
        try await InProcessGateway.with { api in
            let admin = await Tokens.make("ops-\(UUID().uuidString.prefix(6))", admin: true)
            for bad in ["2026-02-30T00:00:00Z", "2026-01-01T00:00:00+22:10", "0000-01-01T00:00:00Z", "soon"] {
                let list = try await api.request("GET", "/v1/admin/dead-letters?dead_after=\(bad.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)", token: admin)
                #expect(list.status == 400, "\(bad): \(list.status) \(list.text)")
                let replay = try await api.json("POST", "/v1/admin/dead-letters/replay", token: admin, ["dead_before": bad, "dry_run": true])
                #expect(replay.status == 422, "\(bad): \(replay.status) \(replay.text)")
            }
            let page = try await api.request("GET", "/v1/admin/dead-letters?dead_after=2999-01-01T00:00:00%2B01:00", token: admin)
            #expect(page.status == 200)
            #expect(page.text.contains(#""next_cursor":null"#), "\(page.text)")
        }
    }

    @Test func knownPathsWithOtherMethodsAnswer405WithAllow() async throws {
        try await InProcessGateway.with { api in
            let put = try await api.request("PUT", "/v1/devices", token: await Tokens.make("m"))
            #expect(put.status == 405 && put.header("Allow") == "GET, HEAD, POST", "\(put.status) \(put.header("Allow") ?? "-")")
            #expect(put.header("Content-Type")?.hasPrefix("application/problem+json") == true)
            let get = try await api.request("GET", "/v1/sync/push")
            #expect(get.status == 405 && get.header("Allow") == "POST")
            let deleteDevice = try await api.request("PATCH", "/v1/devices/\(UUID().uuidString)")
            #expect(deleteDevice.status == 405 && deleteDevice.header("Allow") == "DELETE")
            #expect(try await api.request("GET", "/v1/nothing-here").status == 404)
        }
    }

    @Test func badDiscoverQueriesAre400() async throws {
        try await InProcessGateway.with { api in
            for query in ["q=", "tag=", "q=%FF", "q=a%00b", "tag=%0A", "q=" + String(repeating: "a", count: 201)] {
                let answer = try await api.request("GET", "/v1/public?" + query)
                #expect(answer.status == 400, "\(query): \(answer.status)")
                #expect(answer.header("Content-Type")?.hasPrefix("application/problem+json") == true)
            }
            #expect(try await api.request("GET", "/v1/public?q=%C3%A9cluse").status == 200, "UTF-8 text is searched as sent")
            #expect((try await api.request("GET", "/v1/public?q=+++").json["items"] as? [Any])?.isEmpty == true, "blank finds nothing")
        }
    }
}
