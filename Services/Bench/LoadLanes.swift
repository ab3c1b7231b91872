import Foundation

/// Runs requests on `lanes` threads, each with its own keep-alive connection, so that the
/// load generator costs far less CPU than what it measures: as fast as possible
/// (`rate` 0), or open loop at `rate` requests per second in total — request i is due at
/// start + i/rate and lane l sends the requests i ≡ l (mod lanes). Stops after `seconds`
/// or `total` requests.
enum LoadLanes {
    static func run<T: Sendable>(
        host: String, port: UInt16, lanes: Int, rate: Double, seconds: Double, total: Int = .max,
        _ request: @escaping @Sendable (RawHTTPConnection, Int) throws -> T
    ) async throws -> [T] {
        let started = Date()
        let deadline = started.addingTimeInterval(seconds)
        return try await withThrowingTaskGroup(of: [T].self) { group in
            for lane in 0..<lanes {
                group.addTask {
                    try await onThread {
                        let connection = RawHTTPConnection(host: host, port: port)
                        var mine: [T] = []
                        var index = lane
                        while index < total {
                            if rate > 0 {
                                let due = started.addingTimeInterval(Double(index) / rate)
                                if due >= deadline { break }
                                let wait = due.timeIntervalSinceNow
                                if wait > 0 { usleep(UInt32(wait * 1_000_000)) }
                            } else if Date() >= deadline {
                                break
                            }
                            mine.append(try request(connection, index))
                            index += lanes
                        }
                        return mine
                    }
                }
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
    }

    /// Enough lanes for `rate` when each request takes up to about 100 ms.
    static func lanes(for rate: Double, atLeast minimum: Int) -> Int {
        rate > 0 ? max(minimum, Int(rate / 10) + 1) : minimum
    }
}
