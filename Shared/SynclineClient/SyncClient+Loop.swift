import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import SyncModels
import URLSessionCancellation

/// The sync loop: push every batch, follow jobs to their end, pull when something
/// changed, then wait for a write, a poke, a job to poll, a poll interval or a backoff.
extension SyncClient {
    /// A pass failed in a way worth trying again: why (in words and as `SyncError`), and
    /// not before how many seconds when the server said.
    struct Retry: Error {
        let reason: String
        let after: Double?
        var error: SyncError = .unexpected

        /// `what` could not ask the server (or had no token to ask with).
        static func unreachable(_ what: String, _ cause: any Error) -> Retry {
            let reason = (cause as? ServerAPI.TokenUnavailable)?.description ?? cause.localizedDescription
            return Retry(reason: "\(what) failed: \(reason)", after: nil, error: SyncError(cause))
        }

        /// `what` was answered with a status that is no success.
        static func answered(_ what: String, _ answer: ServerAPI.Answer) -> Retry {
            Retry(reason: "\(what) answered \(answer.status): \(answer.detail)", after: answer.retryAfter,
                  error: SyncError(status: answer.status, retryAfter: answer.retryAfter))
        }
    }

    /// Pushes everything, waits for the jobs to finish and pulls to the end — now, every
    /// backoff started over (as `networkAvailable()` does). Returns within `timeout`
    /// seconds whatever the network does: a request still under way then is abandoned (it
    /// ends by its own timeout, and the background loop carries on). Throws what stopped it
    /// as a `ClientError` (`.syncFailed` when it is worth trying again later), and
    /// `CancellationError` when the calling task is cancelled.
    public func sync(timeout: Double = 30) async throws {
        networkAvailable()
        let deadline = Date().addingTimeInterval(timeout)
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await AbandonOnCancel.run { try await self.passesUntilSynced(deadline: deadline) } }
                group.addTask {
                    try await Task.sleep(for: .seconds(timeout))
                    throw Retry(reason: "did not finish within \(timeout) s", after: nil, error: .offline)
                }
                defer { group.cancelAll() }
                try await group.next()
            }
        } catch let retry as Retry {
            try Task.checkCancellation()
            throw ClientError.syncFailed(reason: retry.reason, retryAfter: retry.after)
        }
    }

    /// Passes until nothing is left to send, follow or pull, or `deadline`.
    func passesUntilSynced(deadline: Date) async throws {
        var askJobsAt = Date().addingTimeInterval(SyncSchedule.liveJobWait)
        schedule.pullWanted = true
        while true {
            if Date() > askJobsAt {
                schedule.outcomeOverdue()
                askJobsAt = Date().addingTimeInterval(SyncSchedule.liveJobWait)
            }
            let jobsInFlight = try await exclusivePass()
            if !jobsInFlight && !schedule.pullWanted { return }
            guard Date() < deadline else { throw Retry(reason: "jobs still running at the sync's timeout", after: nil) }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    func runLoop() async {
        while !Task.isCancelled {
            let outcome: SyncSchedule.Outcome
            do {
                outcome = .synced(jobsInFlight: try await exclusivePass())
            } catch let retry as Retry {
                outcome = .failed(retryAfter: retry.after)
            } catch ClientError.spaceGone {
                stream?.cancel()
                return
            } catch {
                outcome = .failed(retryAfter: nil)
            }
            let wait = schedule.wait(after: outcome, live: live)
            if Task.isCancelled { return }
            if await waitForWake(timeout: wait) == .timedOut { schedule.waitedInVain(live: live) }
        }
    }

    enum Wakeup { case woken, timedOut }

    /// Wakes the loop: it passes again now, or as soon as its current pass ends.
    func wake() {
        if let waiter = wakeup.waiter {
            wakeup.waiter = nil
            waiter.resume()
        } else {
            wakeup.pending = true
        }
    }

    /// Waits for a wake, or `timeout` seconds (nil: no limit). The timer is a child task of
    /// the wait, ended with it.
    func waitForWake(timeout: Double?) async -> Wakeup {
        if wakeup.pending {
            wakeup.pending = false
            return .woken
        }
        wakeup.timedOut = false
        await withTaskGroup(of: Void.self) { timer in
            if let timeout {
                timer.addTask {
                    try? await Task.sleep(for: .seconds(timeout))
                    if !Task.isCancelled { await self.timeUp() }
                }
            }
            await withCheckedContinuation { wakeup.waiter = $0 }
            timer.cancelAll()
        }
        wakeup.pending = false
        return wakeup.timedOut ? .timedOut : .woken
    }

    func timeUp() {
        wakeup.timedOut = true
        wake()
    }

    /// What the loop's wait needs: who waits, whether a wake came while nobody waited,
    /// and whether the last wait ended by its timer.
    struct WakeState {
        var waiter: CheckedContinuation<Void, Never>?
        var pending = false
        var timedOut = false
    }

    /// How a caller of `exclusivePass` is answered: it leads a pass, or is served by one
    /// that started after it asked.
    enum PassTurn: Sendable {
        case lead
        case served(Result<Bool, any Error>)
    }

    /// One pass at a time, whoever asks (the loop or `sync()`): callers take turns, and those
    /// who ask while a pass runs share the next one.
    func exclusivePass() async throws -> Bool {
        let turn: PassTurn = await withCheckedContinuation { caller in
            if passTurns.arrive(caller) { caller.resume(returning: .lead) }
        }
        if case .served(let outcome) = turn { return try outcome.get() }
        let served = passTurns.takeWaiting()
        let outcome: Result<Bool, any Error>
        do {
            outcome = .success(try await recordedPass())
        } catch {
            outcome = .failure(error)
        }
        if Task.isCancelled, case .failure = outcome {
            // The pass ended with its caller's cancellation, not theirs: the others pass again.
            passTurns.putBack(served)
        } else {
            served.forEach { $0.resume(returning: .served(outcome)) }
        }
        passTurns.finish()?.resume(returning: .lead)
        return try outcome.get()
    }

    /// A pass, its failure kept for the status.
    private func recordedPass() async throws -> Bool {
        defer { statusChanged() }
        do {
            return try await pass()
        } catch let retry as Retry {
            lastError = SyncFailure(error: retry.error, detail: retry.reason)
            throw retry
        } catch {
            lastError = SyncFailure(error: SyncError(error), detail: "\(error)")
            throw error
        }
    }

    /// Returns whether jobs are still running on the server.
    func pass() async throws -> Bool {
        if store.spaceGone { throw ClientError.spaceGone }
        try store.checkpointIfLarge()
        let device = try await registeredDevice()
        await refreshRules()
        let uploadFailure = try await uploadPending()
        try await pushAll(device: device)
        let jobsInFlight = try await followJobs()
        await reportSetAside(device: device)
        if schedule.pullWanted { try await pullAll() }
        // The ops waiting for a file that could not be sent wait for the next pass.
        if let uploadFailure { throw uploadFailure }
        lastSyncAt = configuration.now()
        lastError = nil
        return jobsInFlight
    }

    /// Tells the server of ops set aside since the last report, for support to see; a
    /// report that fails is sent again on a later pass.
    func reportSetAside(device: String) async {
        guard let ops = try? store.unreportedSetAside(limit: 500), !ops.isEmpty else { return }
        // Not reported (unreachable, or the server busy): left for a later pass.
        guard (try? await api.reportSetAside(device: device, space: configuration.spaceID, ops: ops)) == true else { return }
        try? store.markReported(ops.map(\.opID))
    }

    func registeredDevice() async throws -> String {
        if let device = try store.meta("device_id") {
            await registration.adopt(device)
            return device
        }
        let device: String
        do {
            let api = self.api, name = configuration.deviceName, platform = configuration.platform
            device = try await registration.id { try await api.registerDevice(name: name, platform: platform) }
        } catch let error as ClientError {
            throw Retry(reason: error.description, after: nil, error: SyncError(error))
        } catch {
            throw Retry.unreachable("registering the device", error)
        }
        try store.setMeta("device_id", device)
        return device
    }

    /// Drops the device id the server does not know, so that the next pass registers anew.
    func forgetDevice(_ device: String) async throws {
        await registration.forget(device)
        if try store.meta("device_id") == device { try store.setMeta("device_id", nil) }
    }

    /// Sends batches until the outbox holds none, setting aside what the server refuses.
    func pushAll(device: String) async throws {
        while let batch = try store.nextBatch(
            device: device, space: configuration.spaceID, maxOps: Limits.maxOpsPerPush, maxBytes: maxBatchBytes) {
            let answer: ServerAPI.Answer
            let trace = TraceParent(batchKey: batch.idempotencyKey)
            lastPushTraceID = trace.traceID
            do {
                answer = try await api.send(
                    "POST", "/v1/sync/push", body: batch.body,
                    headers: ["Idempotency-Key": batch.idempotencyKey, "traceparent": trace.header])
            } catch {
                throw Retry.unreachable("push", error)
            }
            switch answer.pushAnswer(namesSpace: configuration.spaceID != nil, batchOps: batch.opIDs.count) {
            case .accepted(let jobID):
                try store.batchAccepted(batch, jobID: jobID)
            case .setAside(let index, let reason, let rulesVersion):
                noteRulesVersion(rulesVersion)
                try setAside(batch, index: index, reason: reason)
            case .fileMissing(let sha256, let index, let detail):
                // Sent again when this device holds the file (purged, or never sent), else
                // the op is set aside.
                if let sha256, try store.blobMissing(sha256) {
                    try store.batchDissolved(batch)
                    if let failure = try await uploadPending() { throw failure }
                } else {
                    try setAside(batch, index: index, reason: detail)
                }
            case .unknownDeviceOrSpace(let detail):
                // The space may be gone: the pull tells (a 404 there drops it). A space still
                // there (or none named) means the server does not know this device — its
                // database was restored from before the device registered: it registers again.
                if configuration.spaceID != nil { try await pullAll() }
                try await forgetDevice(device)
                try store.batchDissolved(batch)
                throw Retry(reason: "push answered 404: \(detail)", after: nil)
            case .halveBatch:
                maxBatchBytes = max(1_024, maxBatchBytes / 2)
                try store.batchDissolved(batch)
            case .retry:
                throw Retry.answered("push", answer)
            }
        }
    }

    /// Looks the app's rules up (at most once a minute, or at once after an answer named a
    /// newer version) with the kept ETag. A new version is kept with this device's role in
    /// its space, and the ops waiting to be sent that it refuses are set aside with the
    /// rule's name, never dropped. A lookup that fails keeps the rules held: the server
    /// judges anyway.
    func refreshRules() async {
        if !rulesStale, let checked = rulesCheckedAt, configuration.now().timeIntervalSince(checked) < Self.rulesLookupInterval { return }
        rulesCheckedAt = configuration.now()
        rulesStale = false
        do {
            let kept = try store.meta("rules").flatMap { try? JSONCoding.decode(HeldRules.Stored.self, from: Data($0.utf8)) }
            let answer = try await api.send("GET", "/v1/rules", headers: kept?.etag.map { ["If-None-Match": $0] } ?? [:])
            guard answer.status == 200, answer.json != nil else { return }
            if let space = configuration.spaceID {
                let spaces = try await api.send("GET", "/v1/spaces")
                let items = spaces.json?.objectValue?["items"]?.arrayValue ?? []
                if let role = items.first(where: { $0.objectValue?["space_id"]?.stringValue == space })?.objectValue?["role"]?.stringValue {
                    try store.setMeta("role", role)
                }
            }
            let stored = HeldRules.Stored(document: String(decoding: answer.body, as: UTF8.self), etag: answer.header("ETag"))
            try store.setMeta("rules", String(decoding: try JSONCoding.encode(stored), as: UTF8.self))
            rulesHeld = nil
            let held = try heldRules()
            let aside = try store.setAsideRefused { op in held.screen(op).map { HeldRules.reason($0.rule) } }
            for (opID, reason) in aside { eventSink.yield(.setAside(opID: opID, reason: reason)) }
            if !aside.isEmpty { notifyAll() }
        } catch {
            return
        }
    }

    /// How often the rules are looked up when no answer named a newer version (seconds).
    static let rulesLookupInterval: TimeInterval = 60

    /// An answer named a rules version: newer than the one held, the next pass looks them up.
    func noteRulesVersion(_ version: Int64?) {
        guard let version, version > ((try? heldRules())?.version ?? 0) else { return }
        rulesStale = true
    }

    /// Sets aside what the server refused in `batch` (op `index`, or all of it when nil)
    /// and tells the app; the rest goes back to the queue.
    func setAside(_ batch: LocalStore.Batch, index: Int?, reason: String) throws {
        for opID in try store.batchRefused(batch, setAside: index, reason: reason) {
            eventSink.yield(.setAside(opID: opID, reason: reason))
        }
        notifyAll()
    }

    /// Settles every job whose outcome is known; returns whether any is still running (or
    /// has its ops to send again: the server forgot it). While the stream is live it tells
    /// each job's outcome, and a job is asked for only when the outcome was troubled (its
    /// results say which ops were refused) or may have been missed (no stream was live since
    /// the job was sent). A shared space's jobs are asked for with their space, so the server
    /// reads that space alone.
    func followJobs() async throws -> Bool {
        var running = false
        let scope = configuration.spaceID.map { "?space_id=\($0)" } ?? ""
        for jobID in try store.sentJobs() {
            let heard = heardJobs[jobID]
            switch schedule.followUp(heard: heard, live: live) {
            case .settle:
                heardJobs[jobID] = nil
                try jobSucceeded(jobID, checkpoint: heard?.checkpoint ?? 0, results: [])
                continue
            case .wait:
                running = true
                continue
            case .ask:
                heardJobs[jobID] = nil
            }
            if try await !askJob(jobID, scope: scope) { running = true }
        }
        schedule.jobsFollowed(live: live)
        return running
    }

    /// Asks the server how a job ended and settles it; false while it runs (or the server
    /// forgot it: its ops are back in the queue).
    func askJob(_ jobID: String, scope: String) async throws -> Bool {
        let answer: ServerAPI.Answer
        do {
            answer = try await api.send("GET", "/v1/sync/jobs/\(jobID)\(scope)")
        } catch {
            throw Retry.unreachable("job status", error)
        }
        if answer.status == 404 {
            // Its ops are back in the queue: another pass sends them.
            try store.jobForgotten(jobID)
            return false
        }
        guard answer.status == 200, let job = try? JSONCoding.decode(JobView.self, from: answer.body) else {
            throw Retry.answered("job status", answer)
        }
        switch job.status {
        case .succeeded:
            if job.results.contains(where: { $0.reason == RejectReason.rule }) { noteRulesVersion(job.rulesVersion) }
            try jobSucceeded(jobID, checkpoint: Int64(job.checkpoint ?? "0") ?? 0, results: job.results)
        case .dead, .discarded:
            let opIDs = try store.jobDead(jobID, reason: "job \(job.status.rawValue): \(job.lastError ?? "no error recorded")")
            eventSink.yield(.jobDead(jobID: jobID, opIDs: opIDs))
            notifyAll()
        case .queued, .processing, .retrying:
            return false
        }
        return true
    }

    /// A page read after a job of this device was applied holds that job's increments,
    /// adds and removes: before the page shows, the job's outcome (the version each op
    /// took) must be known, or they would count twice. A job still running when asked,
    /// after the page was read, is not in it: a job's changes commit with its outcome.
    func settleJobsInPage(_ changes: [RecordView]) async throws {
        let jobs = try store.sentMergingJobs(touching: Set(changes.map { RecordKey(collection: $0.collection, id: $0.id) }))
        let scope = configuration.spaceID.map { "?space_id=\($0)" } ?? ""
        for jobID in jobs {
            heardJobs[jobID] = nil
            _ = try await askJob(jobID, scope: scope)
        }
    }

    /// A job of this device's succeeded: its refused ops are reported, the others wait for
    /// the pull that shows them.
    func jobSucceeded(_ jobID: String, checkpoint: Int64, results: [OpResult]) throws {
        reachedCursor = max(reachedCursor, checkpoint)
        // An op the rules refused is set aside with the rule's name.
        let named = results.map { result -> OpResult in
            guard result.reason == RejectReason.rule, let rule = result.rule else { return result }
            var named = result
            named.reason = HeldRules.reason(rule)
            return named
        }
        let events = try store.jobSucceeded(jobID, checkpoint: checkpoint, results: named)
        // In the same turn as the outbox changed: no status shows the ops confirmed
        // without the sync that confirmed them.
        lastSyncAt = configuration.now()
        events.forEach { eventSink.yield($0) }
        schedule.pullWanted = true
        notifyAll()
    }

    /// Pulls until `has_more` is false; a 410 starts a resync that keeps unpushed ops. The
    /// next page is fetched while the current one is stored.
    func pullAll() async throws {
        schedule.pullWanted = false
        var changed = Set<RecordKey>()
        defer { notify(changed) }
        var next: Task<ServerAPI.Answer, any Error>?
        defer { next?.cancel() }
        while true {
            let answer: ServerAPI.Answer
            do {
                if let prefetched = next {
                    answer = try await prefetched.value
                } else {
                    let (api, since, reached) = (api, try store.cursor, reachedCursor)
                    answer = try await api.pull(space: configuration.spaceID, device: deviceID, since: since, minCursor: reached, limit: 1_000)
                }
                next = nil
            } catch {
                schedule.pullWanted = true
                throw Retry.unreachable("pull", error)
            }
            if answer.status == 410 {
                try store.beginResync()
                continue
            }
            if answer.status == 404, let space = configuration.spaceID {
                try spaceGone(space)
            }
            guard answer.status == 200 else {
                schedule.pullWanted = true
                throw Retry.answered("pull", answer)
            }
            let page = try ServerAPI.page(answer)
            if page.hasMore {
                let (api, cursor, space, reached, device) = (api, page.cursor, configuration.spaceID, reachedCursor, deviceID)
                next = Task { try await api.pull(space: space, device: device, since: cursor, minCursor: reached, limit: 1_000) }
            }
            try await settleJobsInPage(page.changes)
            changed.formUnion(try store.applyPage(page.changes, cursor: page.cursor, hasMore: page.hasMore))
            if !page.hasMore {
                lastPullAt = configuration.now()
                eventSink.yield(.pulled(cursor: page.cursor))
                return
            }
        }
    }

    /// The space answered 404: its local data goes, the app hears it, syncing ends.
    func spaceGone(_ space: String) throws -> Never {
        let (collections, lost) = try store.forgetSpace()
        if !lost.isEmpty { eventSink.yield(.editsLost(spaceID: space, opIDs: lost)) }
        eventSink.yield(.spaceGone(spaceID: space))
        notify(collections: collections)
        throw ClientError.spaceGone
    }
}
