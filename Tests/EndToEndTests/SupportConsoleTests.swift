import Foundation
import Testing
import TestSupport

/// The support console against real services: "why doesn't device D have record R" answered
/// for each cause, each set up for real (a pull behind, a rule's refusal, a newer write, a
/// stopped worker, purge, a removed member, a revoked device); who may see record data; the
/// audit of every look; a job found by trace id; a device's set-aside report; and the page in
/// Chromium at a desktop and a phone width, with screenshots in test-output/. On a database
/// of its own: the rules are the whole deployment's.
@Suite(.serialized, .timeLimit(.minutes(5)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct SupportConsoleTests {
    static let rules = """
        default: allow
        collections:
          tasks:
            immutable: [kind]
        """

    struct Console {
        let api: APIClient
        let admin: String

        func why(_ device: String, _ space: String, _ id: String) async throws -> (cause: String?, detail: String, facts: [String: Any]) {
            let answer = try await api.request(
                "GET", "/v1/admin/support/why?device_id=\(device)&space_id=\(space)&collection=tasks&id=\(id)", token: admin)
            #expect(answer.status == 200, "\(answer.text)")
            return (answer.json["cause"] as? String, answer.json["detail"] as? String ?? "", answer.json["facts"] as? [String: Any] ?? [:])
        }

        /// Waits until the answer is `cause` (pull marks are written within a second).
        @discardableResult
        func expectWhy(_ device: String, _ space: String, _ id: String, _ cause: String) async throws -> String {
            try await eventually(within: 10, "why \(id) is \(cause)") { () -> String? in
                let answer = try await why(device, space, id)
                return answer.cause == cause ? answer.detail : nil
            }
        }
    }

    static func op(_ type: String, _ id: String, _ data: [String: Any]? = nil, hlc: String? = nil) -> [String: Any] {
        var op: [String: Any] = ["op_id": newOpID(), "type": type, "collection": "tasks", "id": id]
        if let data { op["data"] = data }
        if let hlc { op["hlc"] = hlc }
        return op
    }

    static func pushed(_ api: APIClient, _ member: Member, _ space: String, _ ops: [[String: Any]], headers: [String: String] = [:]) async throws -> String {
        let pushed = try await api.json(
            "POST", "/v1/sync/push", token: member.token, ["device_id": member.device, "space_id": space, "ops": ops], headers: headers)
        #expect(pushed.status == 202, "\(pushed.text)")
        return try #require(pushed.json["job_id"] as? String)
    }

    @Test func everyCauseOfAMissingRecordIsNamedFromFacts() async throws {
        try await OwnDatabase.with { database in
            try await Stack.with(workers: 1, fanouts: 1, environment: database.environment) { stack in
                let api = stack.client
                #expect(try await RulesTests.applyRules(api, Self.rules).status == 200)
                let owner = try await Member.make(api, "owner"), editor = try await Member.make(api, "editor")
                let reader = try await Member.make(api, "reader")
                let space = try await api.makeSpace(owner: owner, with: [(editor, "editor"), (reader, "viewer")])
                let console = Console(api: api, admin: await E2E.token("support-admin", admin: true, support: true))
                let device = reader.device
                func readerPulls() async throws {
                    #expect(try await api.request("GET", "/v1/sync/pull?space_id=\(space)&device_id=\(device)", token: reader.token).status == 200)
                }
                func applied(_ member: Member, _ ops: [[String: Any]]) async throws -> [String: Any] {
                    let job = try await api.awaitJob(member.token, try await Self.pushed(api, member, space, ops))
                    #expect(job["status"] as? String == "succeeded")
                    return job
                }

                // Not yet pulled: the reader pulled before the write, and has no stream.
                try await readerPulls()
                try await eventually(within: 10, "the pull is recorded") { () -> Bool? in
                    let view = try await api.request("GET", "/v1/admin/support/devices/\(device)", token: console.admin)
                    return (view.json["pulls"] as? [[String: Any]])?.first?["space_id"] as? String == space ? true : nil
                }
                _ = try await applied(owner, [Self.op("upsert", "t1", ["title": "Buy milk", "kind": "errand"])])
                let behind = try await console.expectWhy(device, space, "t1", "not_yet_pulled")
                #expect(behind.contains("pulled to cursor") && behind.contains("no open stream"), "\(behind)")
                // With a stream open, the answer says so; after a pull the device has it.
                let stream = try SSEClient(port: stack.fanouts[0].port, path: "/v1/stream?device_id=\(device)&access_token=\(reader.token)")
                defer { stream.close() }
                _ = try await stream.inbox.next("hello", within: 10)
                let streaming = try await eventually(within: 10, "the stream is listed") { () -> String? in
                    let answer = try await console.why(device, space, "t1")
                    return answer.facts["open_streams"] as? Int == 1 ? answer.detail : nil
                }
                #expect(streaming.contains("1 open stream"), "\(streaming)")
                try await readerPulls()
                try await console.expectWhy(device, space, "t1", "delivered")

                // Refused by a rule at apply: the kind is immutable.
                _ = try await applied(owner, [Self.op("upsert", "t2", ["title": "Sail", "kind": "trip"])])
                let refusedJob = try await applied(editor, [Self.op("patch", "t2", ["kind": "errand"])])
                #expect((refusedJob["results"] as? [[String: Any]])?.first?["rule"] as? String == "tasks.immutable.kind")
                try await readerPulls()
                let refused = try await console.expectWhy(device, space, "t2", "refused")
                #expect(refused.contains("tasks.immutable.kind"), "\(refused)")

                // Superseded: an offline device's older edit arrives after a newer one.
                let now = Int64(Date().timeIntervalSince1970 * 1000)
                _ = try await applied(owner, [Self.op("upsert", "t3", ["title": "New"], hlc: "\(now)-00000-\(owner.device)")])
                _ = try await applied(editor, [Self.op("upsert", "t3", ["title": "Old"], hlc: "\(now - 60_000)-00000-\(editor.device)")])
                try await readerPulls()
                try await console.expectWhy(device, space, "t3", "superseded")
                // The record's history shows both jobs, newest first, with their results and data.
                let history = try await api.request("GET", "/v1/admin/support/spaces/\(space)/record?collection=tasks&id=t3", token: console.admin)
                #expect(history.status == 200, "\(history.text)")
                let jobs = history.json["history"] as? [[String: Any]] ?? []
                let results = jobs.compactMap { (($0["ops"] as? [[String: Any]])?.first?["result"] as? [String: Any])?["status"] as? String }
                #expect(results == ["superseded", "applied"])
                #expect(((history.json["record"] as? [String: Any])?["data"] as? [String: Any])?["title"] as? String == "New")
                #expect(history.json["kept_since"] is String)

                // Job still queued: the worker is stopped.
                for worker in stack.workers { _ = worker.stop() }
                stack.workers = []
                let queued = try await Self.pushed(api, owner, space, [Self.op("upsert", "t4", ["title": "Later"])])
                let waiting = try await console.expectWhy(device, space, "t4", "job_queued")
                #expect(waiting.contains(queued))
                try await stack.addWorker()
                _ = try await api.awaitJob(owner.token, queued)

                // Purged: deleted, and its tombstone purged past the space's horizon.
                _ = try await applied(owner, [Self.op("upsert", "t5", ["title": "Gone"])])
                _ = try await applied(owner, [Self.op("delete", "t5")])
                try await Task.sleep(for: .milliseconds(1500))
                let purge = Shell.output(
                    "DATABASE_URL='\(database.url)' TOMBSTONE_RETENTION=1s JOB_RETENTION=1h \(E2E.binaries)/purge --once 2>&1")
                #expect(purge.0 == 0, "\(purge.1)")
                try await console.expectWhy(device, space, "t5", "purged")
                try await console.expectWhy(device, space, "nothing", "never_written")

                // Removed from the space, then the device revoked.
                #expect(try await api.request("DELETE", "/v1/spaces/\(space)/members/\(reader.user)", token: owner.token).status == 204)
                try await console.expectWhy(device, space, "t1", "not_a_member")
                #expect(try await api.request("DELETE", "/v1/devices/\(device)", token: reader.token).status == 204)
                try await console.expectWhy(device, space, "t1", "device_revoked")
            }
        }
    }

    @Test func recordDataNeedsTheSupportScopeAndEveryLookIsAudited() async throws {
        try await InProcessStack.with(workers: 1) { stack in
            let api = stack.client
            let owner = try await Member.make(api, "audited")
            let space = try await api.makeSpace(owner: owner)
            let traceID = String((UUID().uuidString + UUID().uuidString).replacingOccurrences(of: "-", with: "").lowercased().prefix(32))
            let jobID = try await Self.pushed(
                api, owner, space, [Self.op("upsert", "secret", ["title": "Diary"])],
                headers: ["traceparent": "00-\(traceID)-00f067aa0ba902b7-01"])
            _ = try await api.awaitJob(owner.token, jobID)
            let operatorName = "ops-\(UUID().uuidString.prefix(6))", supportName = "support-\(UUID().uuidString.prefix(6))"
            let admin = await E2E.token(operatorName, admin: true)
            let support = await E2E.token(supportName, admin: true, support: true)
            // A scope without the admin role gives nothing.
            let scopedUser = await E2E.token("not-admin", support: true)

            let dataRoutes: [(String, String, [String: Any]?)] = [
                ("POST", "/v1/admin/support/spaces/\(space)/records", ["collection": "tasks"]),
                ("GET", "/v1/admin/support/spaces/\(space)/record?collection=tasks&id=secret", nil),
            ]
            let otherRoutes = [
                "/v1/admin/support/user?user_id=\(owner.user)", "/v1/admin/support/devices/\(owner.device)",
                "/v1/admin/support/jobs/\(jobID)", "/v1/admin/support/spaces/\(space)",
                "/v1/admin/support/why?device_id=\(owner.device)&space_id=\(space)&collection=tasks&id=secret",
            ]
            func call(_ method: String, _ path: String, _ body: [String: Any]?, _ token: String) async throws -> HTTPResult {
                if let body { return try await api.json(method, path, token: token, body) }
                return try await api.request(method, path, token: token)
            }
            for token in [owner.token, scopedUser] {
                for (method, path, body) in dataRoutes { #expect(try await call(method, path, body, token).status == 403, "\(path)") }
                for path in otherRoutes { #expect(try await api.request("GET", path, token: token).status == 403, "\(path)") }
            }
            for (method, path, body) in dataRoutes {
                let refused = try await call(method, path, body, admin)
                #expect(refused.status == 403 && !refused.text.contains("Diary"), "\(path): \(refused.text)")
                let shown = try await call(method, path, body, support)
                #expect(shown.status == 200 && shown.text.contains("Diary"), "\(path): \(shown.text)")
            }
            for path in otherRoutes {
                let answer = try await api.request("GET", path, token: admin)
                #expect(answer.status == 200 && !answer.text.contains("Diary"), "\(path): \(answer.text)")
            }

            // The job by its trace id (as the app's status shows it) and by the whole traceparent.
            for key in [traceID, "00-\(traceID)-00f067aa0ba902b7-01"] {
                let job = try await api.request("GET", "/v1/admin/support/jobs/\(key)", token: admin)
                #expect(job.json["job_id"] as? String == jobID, "\(key): \(job.text)")
                let op = (job.json["ops"] as? [[String: Any]])?.first
                #expect((op?["result"] as? [String: Any])?["status"] as? String == "applied")
                #expect(op?["data"] == nil)
                #expect(job.json["device_id"] as? String == owner.device)
            }
            #expect(try await api.request("GET", "/v1/admin/support/jobs/\(UUID().uuidString)", token: admin).status == 404)
            let unknownSpace = "/v1/admin/support/why?device_id=\(owner.device)&space_id=\(UUID().uuidString)&collection=tasks&id=secret"
            #expect(try await api.request("GET", unknownSpace, token: admin).status == 404)
            #expect(try await api.request("GET", "/v1/admin/support/why?device_id=nope&space_id=\(space)&collection=tasks&id=x", token: admin).status == 400)
            #expect(try await api.request("GET", "/v1/admin/support/spaces/\(space)/record?collection=Tasks&id=x", token: support).status == 400)
            #expect(try await api.request("GET", "/v1/admin/support/user?user_id=nobody-\(UUID().uuidString)", token: admin).status == 404)

            // A device's report of ops set aside shows on the device.
            let opID = newOpID()
            let report = try await api.json("POST", "/v1/devices/\(owner.device)/set-aside", token: owner.token, [
                "ops": [["op_id": opID, "reason": "rule", "space_id": space, "collection": "tasks", "id": "secret", "job_id": jobID]],
            ])
            #expect(report.status == 204, "\(report.text)")
            #expect(try await api.json("POST", "/v1/devices/\(owner.device)/set-aside", token: owner.token, ["ops": [["op_id": "x", "reason": "rule"]]]).status == 422)
            #expect(try await api.json("POST", "/v1/devices/\(UUID().uuidString)/set-aside", token: owner.token, ["ops": []]).status == 404)
            let device = try await api.request("GET", "/v1/admin/support/devices/\(owner.device)", token: admin)
            let reported = (device.json["set_aside_ops"] as? [[String: Any]])?.first
            #expect(reported?["op_id"] as? String == opID && reported?["reason"] as? String == "rule", "\(device.text)")
            #expect(device.json["set_aside"] as? Int == 1)

            // Every look is in the audit log: who looked at whose data.
            let audit = try await api.request("GET", "/v1/admin/audit?limit=100", token: admin).json["items"] as? [[String: Any]] ?? []
            let supportLooks = audit.filter { $0["actor"] as? String == supportName }
            #expect(Set(supportLooks.compactMap { $0["action"] as? String }) == ["support.records", "support.record"])
            #expect(supportLooks.allSatisfy { $0["subject"] as? String == owner.user })
            let operatorLooks = audit.filter { $0["actor"] as? String == operatorName }.compactMap { $0["action"] as? String }
            for action in ["support.user", "support.device", "support.job", "support.space", "support.why"] {
                #expect(operatorLooks.contains(action), "\(action) audited")
            }
            #expect(!operatorLooks.contains("support.records"), "a refused look shows nothing and is not a look")
        }
    }

    /// A support engineer in Chromium: finds a user, opens a device, follows a job to its
    /// ops and one op to its record's history, browses the space's records, asks why, at a
    /// desktop width and at a phone's; an admin without the support scope sees no data.
    @Test func aSupportEngineerFollowsADeviceToAJobAndARecordInThePage() async throws {
        try await Stack.with(workers: 1) { stack in
            let api = stack.client
            let owner = try await Member.make(api, "paged")
            let space = try await api.makeSpace(owner: owner, name: "Boat")
            _ = try await api.awaitJob(owner.token, try await Self.pushed(api, owner, space, [
                Self.op("upsert", "rigging", ["title": "Check the rigging", "done": false]),
                Self.op("upsert", "fuel", ["title": "Fill the tank", "done": true]),
            ]))
            let jobID = try await Self.pushed(api, owner, space, [Self.op("patch", "rigging", ["done": true])])
            _ = try await api.awaitJob(owner.token, jobID)
            #expect(try await api.request("GET", "/v1/sync/pull?space_id=\(space)&device_id=\(owner.device)", token: owner.token).status == 200)
            let output = E2E.environment["SYNCLINE_TEST_OUTPUT"] ?? NSTemporaryDirectory()
            let support = await E2E.token("page-support", admin: true, support: true)

            for (width, height, name) in [(1280, 900, "desktop"), (390, 844, "phone")] {
                let browser = try Browser(width: width, height: height)
                defer { browser.quit() }
                try browser.open("\(api.base)/admin/support")
                try browser.waitFor("!document.getElementById('login').hidden")
                try browser.type(into: "#token", support)
                try browser.click("#login-form button")
                try browser.waitFor("!document.getElementById('app').hidden")

                // A user, then their device.
                try browser.type(into: "#find-text", owner.user)
                try browser.click("#find-form button")
                try browser.waitFor("document.querySelector('tr.device-row a')")
                try browser.screenshot(to: "\(output)/support-\(name)-user.png")
                try browser.click("tr.device-row a")
                try browser.waitFor("document.querySelectorAll('tr.job-row').length === 2")
                let pulled = try browser.evaluate("document.getElementById('view').textContent.includes('Pulls')") as? Bool
                #expect(pulled == true)
                try browser.screenshot(to: "\(output)/support-\(name)-device.png")
                // The newest job, its op and that op's record with its history.
                try browser.click("tr.job-row a")
                try browser.waitFor("document.querySelector('tr.op-row')")
                let result = try browser.evaluate("document.querySelector('tr.op-row .badge').textContent") as? String
                #expect(result == "applied")
                try browser.screenshot(to: "\(output)/support-\(name)-job.png")
                try browser.click("tr.op-row a")
                try browser.waitFor("document.querySelectorAll('tr.history-row').length === 2")
                let data = try browser.evaluate("document.getElementById('record-data').textContent") as? String
                #expect(data?.contains("Check the rigging") == true)
                try browser.screenshot(to: "\(output)/support-\(name)-record.png")

                // The space's records, and why the device has one.
                _ = try browser.evaluate("document.getElementById('find-kind').value = 'space'")
                _ = try browser.evaluate("document.getElementById('find-text').value = ''")
                try browser.type(into: "#find-text", space)
                try browser.click("#find-form button")
                try browser.waitFor("document.querySelectorAll('tr.record-row').length === 2")
                try browser.screenshot(to: "\(output)/support-\(name)-space.png")
                _ = try browser.evaluate("document.getElementById('why-device').value = '\(owner.device)'")
                try browser.click("#why-form button")
                try browser.waitFor("document.getElementById('answer').dataset.cause === 'delivered'")
                try browser.screenshot(to: "\(output)/support-\(name)-why.png")
                // Nothing is wider than the window: usable at a phone's width.
                let fits = try browser.evaluate("document.documentElement.scrollWidth <= window.innerWidth") as? Bool
                #expect(fits == true, "\(name): the page is wider than the window")
                #expect(try browser.evaluate("sessionStorage.length + localStorage.length") as? Int == 0)
            }

            // Without the support scope, the space shows but its records do not.
            let browser = try Browser()
            defer { browser.quit() }
            try browser.open("\(api.base)/admin/support")
            try browser.waitFor("!document.getElementById('login').hidden")
            try browser.type(into: "#token", await E2E.token("page-operator", admin: true))
            try browser.click("#login-form button")
            _ = try browser.evaluate("document.getElementById('find-kind').value = 'space'")
            try browser.type(into: "#find-text", space)
            try browser.click("#find-form button")
            try browser.waitFor("document.getElementById('records-refused')")
            let shown = try browser.evaluate("document.body.textContent.includes('Check the rigging')") as? Bool
            #expect(shown == false)
            try browser.screenshot(to: "\(output)/support-without-scope.png")
        }
    }
}
