import Foundation
import Testing
import TestSupport

/// A space exported from one deployment and imported into another: the copy pulls as the
/// original does (records, tombstones, files), its clocks decide an old device's ops as the
/// original's would, and both commands stream (their peak memory is measured).
@Suite(.serialized, .timeLimit(.minutes(8)), .enabled(if: E2E.enabled, "needs DATABASE_URL, AMQP_URL and built services"))
struct ExportImportTests {
    /// Runs syncctl against `database` under `/usr/bin/time`; answers its exit status, output
    /// and peak resident memory in KiB.
    static func syncctl(_ arguments: String, database: OwnDatabase) async -> (status: Int32, output: String, peakKiB: Int) {
        let report = FileManager.default.temporaryDirectory.appendingPathComponent("time-\(UUID().uuidString)").path
        let run = await Shell.runOffThePool(
            "DATABASE_URL='\(database.url)' /usr/bin/time -f %M -o \(report) \(E2E.binaries)/syncctl \(arguments) 2>/dev/null")
        let peak = Int((try? String(contentsOfFile: report, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "") ?? 0
        try? FileManager.default.removeItem(atPath: report)
        return (run.status, run.output, peak)
    }

    /// A comparable form of a pulled record: its key, whether deleted, its data.
    static func shape(_ change: [String: Any]) -> String {
        let data = (change["data"] as? [String: Any]).map { String(decoding: try! JSONSerialization.data(withJSONObject: $0, options: .sortedKeys), as: UTF8.self) }
        return "\(change["collection"]!)/\(change["id"]!) deleted=\(change["deleted"] as? Bool ?? false) \(data ?? "-")"
    }

    @Test func aSpaceExportedAndImportedElsewherePullsTheSameAndMergesAsTheOriginal() async throws {
        let records = Int(ProcessInfo.processInfo.environment["EXPORT_TEST_RECORDS"] ?? "") ?? 20_000
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("export-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        try await OwnDatabase.with { source in
            try await OwnDatabase.with { target in
                let alice = "alice-\(UUID().uuidString.prefix(6))"
                let token = await E2E.token(alice)
                var original: [String] = []
                var space = ""
                var files: [(Data, String)] = []
                try await InProcessStack.with(workers: 2, environment: source.environment) { stack in
                    let api = stack.client
                    let device = try await api.registerDevice(token)
                    let bob = try await Member.make(api, "bob")
                    space = try await api.makeSpace(owner: Member(user: alice, token: token, device: device), with: [(bob, "viewer")])
                    for index in 0..<3 {
                        let data = AttachmentTests.randomBytes(200_000 + index)
                        let sha = AttachmentTests.sha256(data)
                        let put = try await AttachmentTests.put(api, token, data, space: space)
                        #expect([200, 201].contains(put.status), "\(put.text)")
                        files.append((data, sha))
                    }
                    var jobs: [String] = []
                    for start in stride(from: 0, to: records, by: 500) {
                        var ops: [[String: Any]] = (start..<min(start + 500, records)).map { index in
                            var data: [String: Any] = ["title": "item \(index)", "n": index]
                            if index < 3 { data["photo"] = AttachmentTests.reference(files[index].0, files[index].1) }
                            return ["op_id": newOpID(), "type": "upsert", "collection": "items", "id": "i\(index)", "data": data]
                        }
                        if start == 0 {
                            ops.removeLast(2)
                            ops += [["op_id": newOpID(), "type": "delete", "collection": "items", "id": "i7"],
                                    ["op_id": newOpID(), "type": "patch", "collection": "items", "id": "i8", "data": ["n": -8]]]
                        }
                        let pushed = try await api.json("POST", "/v1/sync/push", token: token, ["device_id": device, "space_id": space, "ops": ops])
                        jobs.append(try #require(pushed.json["job_id"] as? String, "\(pushed.text)"))
                    }
                    for job in jobs { #expect(try await api.awaitJob(token, job, within: 120)["status"] as? String == "succeeded") }
                    original = try await api.pullAll(token, limit: 5000, space: space).changes.map(Self.shape).sorted()
                }

                let export = work.appendingPathComponent("space.ndjson").path
                let exported = await Self.syncctl("export --space \(space) --files \(work.path)/files -o \(export)", database: source)
                try #require(exported.status == 0, "export: \(exported.output)")
                let imported = await Self.syncctl("import \(export) --files \(work.path)/files", database: target)
                try #require(imported.status == 0, "import: \(imported.output)")
                let summary = try #require(try JSONSerialization.jsonObject(with: Data(imported.output.utf8)) as? [String: Any])
                let copy = try #require((summary["spaces"] as? [String: String])?[space])
                #expect(summary["files"] as? Int == 3)
                // Streamed: the whole space never sits in memory (measured, and bounded well
                // below what 20,000 records' JSON would take held several times over).
                print("export of \(records) records: peak \(exported.peakKiB) KiB; import: peak \(imported.peakKiB) KiB")
                #expect(exported.peakKiB > 0 && exported.peakKiB < 120_000)
                #expect(imported.peakKiB > 0 && imported.peakKiB < 120_000)

                try await InProcessStack.with(workers: 1, environment: target.environment) { stack in
                    let api = stack.client
                    let device = try await api.registerDevice(token)
                    let pulled = try await api.pullAll(token, limit: 5000, space: copy)
                    #expect(pulled.changes.map(Self.shape).sorted() == original)
                    for (data, sha) in files {
                        let file = try await api.request("GET", "/v1/blobs/\(sha)?space_id=\(copy)", token: token)
                        #expect(file.status == 200 && file.body == data)
                    }
                    // The clocks came along: a device's op stamped before the record's last write
                    // loses there, as it would have in the original; one after it wins.
                    let stale = "1000000000000-00000-\(device)"
                    let pushed = try await api.json("POST", "/v1/sync/push", token: token, ["device_id": device, "space_id": copy, "ops": [
                        ["op_id": newOpID(), "type": "patch", "collection": "items", "id": "i9", "data": ["n": 0], "hlc": stale],
                        ["op_id": newOpID(), "type": "patch", "collection": "items", "id": "i10", "data": ["n": 0]],
                    ]])
                    _ = try await api.awaitJob(token, try #require(pushed.json["job_id"] as? String))
                    let after = latestState(try await api.pullAll(token, since: pulled.cursor, limit: 100, space: copy).changes)
                    #expect((after["items/i9"]?["data"] as? [String: Any])?["n"] as? Int ?? 9 == 9)
                    #expect((after["items/i10"]?["data"] as? [String: Any])?["n"] as? Int == 0)
                    // A cut-short export is refused, and leaves nothing behind.
                    let text = try String(contentsOfFile: export, encoding: .utf8)
                    let cut = work.appendingPathComponent("cut.ndjson").path
                    try String(text.prefix(text.utf8.count / 2)).write(toFile: cut, atomically: true, encoding: .utf8)
                    let spacesBefore = await Shell.runOffThePool("psql '\(target.url)' -Atc 'SELECT count(*) FROM spaces'").output
                    let refused = await Self.syncctl("import \(cut)", database: target)
                    #expect(refused.status != 0)
                    let spacesAfter = await Shell.runOffThePool("psql '\(target.url)' -Atc 'SELECT count(*) FROM spaces'").output
                    #expect(spacesAfter == spacesBefore)
                }
            }
        }
    }
}
