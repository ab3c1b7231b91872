/// Runs `body`, then `cleanup`, whether `body` returned or threw: an asynchronous `defer`
/// (a stack stopped, a database dropped).
public func withCleanup<T>(_ body: () async throws -> T, cleanup: () async -> Void) async throws -> T {
    let value: T
    do {
        value = try await body()
    } catch {
        await cleanup()
        throw error
    }
    await cleanup()
    return value
}
