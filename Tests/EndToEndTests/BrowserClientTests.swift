import Foundation
import Testing
import TestSupport

/// A web client on another origin, in headless Chromium: CORS lets the allowed origin
/// register a device, push, follow the job, pull and stream; another origin is refused.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct BrowserClientTests {
    static let page = """
        <!doctype html><meta charset="utf-8"><title>web client</title><pre id="log"></pre>
        <script>
        window.events = [];
        window.run = async (api, streams, token) => {
          const auth = {'Authorization': 'Bearer ' + token};
          const json = Object.assign({'Content-Type': 'application/json'}, auth);
          let answer = await fetch(api + '/v1/devices', {method: 'POST', headers: json,
            body: JSON.stringify({name: 'web', platform: 'web'})});
          const device = (await answer.json()).device_id;
          answer = await fetch(api + '/v1/sync/push', {method: 'POST',
            headers: Object.assign({'Idempotency-Key': 'web-' + crypto.randomUUID()}, json),
            body: JSON.stringify({device_id: device, ops: [{op_id: crypto.randomUUID(), type: 'upsert',
              collection: 'notes', id: 'web-1', data: {title: 'from the browser'}}]})});
          const location = answer.headers.get('Location');
          let job = {};
          for (let i = 0; i < 100 && job.status !== 'succeeded'; i++) {
            job = await (await fetch(api + location, {headers: auth})).json();
            if (job.status !== 'succeeded') await new Promise(r => setTimeout(r, 100));
          }
          const pull = await (await fetch(api + '/v1/sync/pull', {headers: auth})).json();
          const source = new EventSource(streams + '/v1/stream?device_id=' + device + '&access_token=' + encodeURIComponent(token));
          source.onmessage = (event) => window.events.push(JSON.parse(event.data));
          return JSON.stringify({device, location, status: job.status, checkpoint: job.checkpoint,
            pulled: pull.changes.map(c => c.id)});
        };
        window.tryFetch = async (url, token) => {
          try { await fetch(url, {headers: {'Authorization': 'Bearer ' + token}}); return 'ok'; }
          catch (error) { return 'refused: ' + error.name; }
        };
        </script>
        """

    @Test func anAllowedOriginSyncsAndStreamsAnotherIsRefused() async throws {
        let allowed = try await StaticFileServer()
        let other = try await StaticFileServer()
        defer {
            allowed.stop()
            other.stop()
        }
        try allowed.write("index.html", Self.page)
        try other.write("index.html", Self.page)
        try await Stack.with(workers: 1, fanouts: 1, environment: ["CORS_ALLOWED_ORIGINS": "https://app.example,\(allowed.base)"]) { stack in
            let api = stack.client.base, streams = "http://127.0.0.1:\(stack.fanoutPorts[0])"
            let user = "web-\(UUID().uuidString.prefix(6))"
            let token = await E2E.token(user)
            let browser = try Browser()
            defer { browser.quit() }
            try browser.open("\(allowed.base)/index.html")
            let resultText = try #require(try browser.evaluate("window.run(\(Browser.quoted(api)), \(Browser.quoted(streams)), \(Browser.quoted(token)))") as? String)
            let result = try #require(try JSONSerialization.jsonObject(with: Data(resultText.utf8)) as? [String: Any])
            #expect(result["status"] as? String == "succeeded", "\(resultText)")
            #expect((result["location"] as? String)?.hasPrefix("/v1/sync/jobs/") == true, "Location is exposed: \(resultText)")
            #expect(result["pulled"] as? [String] == ["web-1"], "\(resultText)")
            try browser.waitFor("window.events.some(e => e.type === 'hello')")

            // Another device of the user pushes: the page's stream gets a poke.
            let phone = try await stack.client.registerDevice(token, name: "phone")
            let push = try await stack.client.push(token, device: phone, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "notes", "id": "phone-1", "data": ["t": 1]],
            ])
            #expect(push.status == 202)
            try browser.waitFor("window.events.some(e => e.type === 'poke')")

            // The same page from an origin that is not allowed cannot read the API…
            try browser.open("\(other.base)/index.html")
            let refused = try browser.evaluate("window.tryFetch(\(Browser.quoted(api + "/v1/devices")), \(Browser.quoted(token)))") as? String
            #expect(refused?.hasPrefix("refused") == true, "\(refused ?? "nil")")
            // …but public content answers any origin.
            let open = try browser.evaluate("window.tryFetch(\(Browser.quoted(api + "/v1/public")), '')") as? String
            #expect(open == "ok", "\(open ?? "nil")")
        }
    }

    @Test func preflightsAnswerTheHeadersBrowsersNeed() async throws {
        try await InProcessStack.with(workers: 1, fanouts: 1, environment: ["CORS_ALLOWED_ORIGINS": "https://app.example"]) { stack in
            let preflight = try await stack.client.request("OPTIONS", "/v1/sync/push", headers: [
                "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type,idempotency-key,traceparent",
            ])
            #expect(preflight.status == 204)
            #expect(preflight.header("Access-Control-Allow-Origin") == "https://app.example")
            let allowedHeaders = preflight.header("Access-Control-Allow-Headers")?.lowercased() ?? ""
            for name in ["authorization", "content-type", "idempotency-key", "traceparent"] {
                #expect(allowedHeaders.contains(name), "\(name) in \(allowedHeaders)")
            }
            #expect(preflight.header("Access-Control-Allow-Methods")?.contains("POST") == true)
            let answer = try await stack.client.request("GET", "/v1/devices", headers: ["Origin": "https://app.example"])
            #expect(answer.status == 401 && answer.header("Access-Control-Allow-Origin") == "https://app.example")
            #expect(answer.header("Access-Control-Expose-Headers")?.contains("Retry-After") == true)
            let stranger = try await stack.client.request("OPTIONS", "/v1/sync/push", headers: [
                "Origin": "https://evil.example", "Access-Control-Request-Method": "POST",
            ])
            #expect(stranger.header("Access-Control-Allow-Origin") == nil)
            let fanout = try await APIClient(base: "http://127.0.0.1:\(stack.fanoutPorts[0])").request("OPTIONS", "/v1/stream", headers: [
                "Origin": "https://app.example", "Access-Control-Request-Method": "GET",
            ])
            #expect(fanout.status == 204 && fanout.header("Access-Control-Allow-Origin") == "https://app.example")
        }
    }
}
