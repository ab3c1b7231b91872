import Foundation
import Testing
import TestSupport

/// The `/admin` page in a real browser: headless Chromium loads it, the operator pastes an
/// admin token, sees a dead letter with its reason, clicks Replay, and sees it leave the
/// list while the job succeeds. Screenshots land in test-output/.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct AdminPageTests {
    @Test func operatorReplaysADeadLetterFromThePage() async throws {
        let failing = try await FailureTests.FailingCollection("page_poison")
        var removed = false
        defer { if !removed { Task { try? await failing.remove() } } }
        try await Stack.with(workers: 1) { stack in
            let api = stack.client
            let user = "page-\(UUID().uuidString.prefix(6))"
            let token = await E2E.token(user)
            let device = try await api.registerDevice(token)
            let push = try await api.push(token, device: device, ops: [
                ["op_id": newOpID(), "type": "upsert", "collection": "page_poison", "id": "c1", "data": ["title": "Pre-departure checklist"]],
            ])
            let jobID = try #require(push.json["job_id"] as? String)
            #expect(try await api.awaitJob(token, jobID)["status"] as? String == "dead")
            try await failing.remove()
            removed = true

            let output = E2E.environment["SYNCLINE_TEST_OUTPUT"] ?? NSTemporaryDirectory()
            let browser = try Browser()
            defer { browser.quit() }
            try browser.open("\(api.base)/admin")
            try browser.waitFor("!document.getElementById('login').hidden")
            try browser.type(into: "#token", await E2E.token("page-operator", admin: true))
            try browser.click("#save")
            let row = "tr[data-job-id='\(jobID)']"
            try browser.waitFor("document.querySelector(\"\(row)\")")
            let reason = try browser.evaluate("document.querySelector(\"\(row) .reason\").textContent") as? String
            #expect(reason == "max_attempts")
            // Dead letters carry the job's space; the page shows it and the API and syncctl
            // filter by it.
            let space = try #require(try await api.request("GET", "/v1/sync/jobs/\(jobID)", token: token).json["space_id"] as? String)
            let shownSpace = try browser.evaluate("document.querySelector(\"\(row)\").children[2].textContent") as? String
            #expect(shownSpace == space)
            let admin = await E2E.token("page-operator", admin: true)
            for (filter, listed) in [(space, true), (UUID().uuidString.lowercased(), false)] {
                let page = try await api.request("GET", "/v1/admin/dead-letters?space_id=\(filter)&limit=500", token: admin)
                let ids = (page.json["items"] as? [[String: Any]])?.compactMap { $0["job_id"] as? String } ?? []
                #expect(ids.contains(jobID) == listed, "space_id=\(filter)")
                let (status, output) = try SyncctlTests().syncctl("dlq list --space \(filter) --limit 500 --json")
                #expect(status == 0 && output.contains(jobID) == listed, "syncctl dlq list --space \(filter)")
            }
            #expect(try await api.request("GET", "/v1/admin/dead-letters?space_id=nope", token: admin).status == 400)
            let queues = try browser.evaluate("document.querySelectorAll('#queues tbody tr').length") as? Int
            #expect((queues ?? 0) >= 3, "the queue table lists the pipeline's queues")
            try browser.screenshot(to: "\(output)/admin-page.png")

            try browser.click("\(row) button.replay")
            try browser.waitFor("!document.querySelector(\"\(row)\")")
            try browser.screenshot(to: "\(output)/admin-page-after-replay.png")
            #expect(try await api.awaitJob(token, jobID)["status"] as? String == "succeeded")
            // The token stayed in the page's memory: not in web storage, a cookie or the URL.
            #expect(try browser.evaluate("sessionStorage.length + localStorage.length") as? Int == 0)
            #expect(try browser.evaluate("document.cookie") as? String == "")
            #expect(try browser.evaluate("location.href.includes('ey')") as? Bool == false)
        }
    }
}
