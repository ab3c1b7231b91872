import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import SyncModels

/// The live stream (narrowed to this client's space when it is a shared one): a `hello` or
/// `poke` of this space whose cursor is past ours asks for a pull, a `job` message for a
/// job poll. A stream silent for two heartbeat intervals is dead; it is reconnected with
/// backoff, and while none can be had the loop polls. A refused stream asks for a pull,
/// which tells whether the space is gone.
extension SyncClient {
    func runStream() async {
        var backoff = Backoff(base: 0.5, cap: 30)
        var refresh = false
        while !Task.isCancelled && !store.spaceGone {
            guard let fanout = configuration.fanoutURL, let device = deviceID,
                  let token = try? await configuration.tokenProvider(refresh)
            else {
                await napBeforeReconnecting(&backoff)
                continue
            }
            var components = URLComponents(url: fanout, resolvingAgainstBaseURL: false)
            components?.path = "/v1/stream"
            components?.queryItems = [URLQueryItem(name: "device_id", value: device)]
                + (configuration.spaceID.map { [URLQueryItem(name: "space_id", value: $0)] } ?? [])
            guard let url = components?.url else { return }
            let connection = EventStreamConnection(url: url, token: token)
            lastStreamMessageAt = Date()
            let watchdog = Task { await self.watch(connection) }
            refresh = false
            do {
                for try await message in connection.messages {
                    if !live {
                        live = true
                        backoff.reset()
                        statusChanged()
                    }
                    lastStreamMessageAt = Date()
                    handle(message)
                }
            } catch ClientError.server(let status, _) where status == 401 {
                refresh = true
            } catch ClientError.server(let status, _) where status == 404 {
                schedule.pullWanted = true
                wake()
            } catch {}
            watchdog.cancel()
            connection.cancel()
            if live {
                live = false
                statusChanged()
                schedule.pullWanted = true  // pokes may have been missed while it was down
                wake()
            }
            if Task.isCancelled { return }
            await napBeforeReconnecting(&backoff)
        }
    }

    /// The stream's wait before it reconnects, the backoff's next (from the start again
    /// after `networkAvailable()`, which also cuts a wait under way short).
    func napBeforeReconnecting(_ backoff: inout Backoff) async {
        if streamBackoffReset {
            streamBackoffReset = false
            backoff.reset()
        }
        let seconds = backoff.next()
        let nap = Task<Void, Never> { try? await Task.sleep(for: .seconds(seconds)) }
        streamNap = nap
        await withTaskCancellationHandler { await nap.value } onCancel: { nap.cancel() }
        streamNap = nil
    }

    /// The network is back — the app heard it (on Apple platforms the client hears it
    /// itself, from `NWPathMonitor`): every backoff starts over, the stream reconnects now,
    /// and the loop passes now and pulls what was missed. `sync()` does the same.
    public func networkAvailable() {
        schedule.networkBack()
        streamBackoffReset = true
        streamNap?.cancel()
        wake()
    }

    /// Cancels the connection once it has been silent for two heartbeat intervals.
    func watch(_ connection: EventStreamConnection) async {
        let limit = configuration.heartbeatInterval * 2
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(max(0.05, limit / 4)))
            if Date().timeIntervalSince(lastStreamMessageAt) > limit {
                connection.cancel()
                return
            }
        }
    }

    func handle(_ message: String) {
        guard let fields = (try? JSONParser.parse(message))?.objectValue, let type = fields["type"]?.stringValue else { return }
        switch type {
        case "hello", "poke":
            let space = fields["space_id"]?.stringValue
            if type == "hello" {
                streamSpace = space
                schedule.streamOpened()
            }
            // A stream of every space (the personal client's) also hears the others.
            if let space, let mine = streamSpace, space != mine { return }
            let theirs = fields["cursor"]?.stringValue.flatMap { Int64($0) } ?? 0
            let ours = ((try? store.cursor) ?? nil).flatMap { Int64($0) } ?? -1
            reachedCursor = max(reachedCursor, theirs)
            if theirs > ours {
                schedule.pullWanted = true
                wake()
            }
        case "job":
            if let job = fields["job_id"]?.stringValue, let status = fields["status"]?.stringValue {
                if heardJobs.count >= 10_000 { heardJobs.removeAll() }  // outcomes of jobs this device no longer follows
                heardJobs[job] = HeardJob(
                    status: status, checkpoint: fields["checkpoint"]?.stringValue.flatMap { Int64($0) },
                    troubled: fields["troubled"]?.boolValue != false)
            }
            wake()
        default:
            break
        }
    }
}

/// A job's outcome as the stream told it: `troubled` when the job had refused ops or died
/// (its results, asked for, say which).
struct HeardJob: Sendable {
    let status: String
    let checkpoint: Int64?
    let troubled: Bool
}
