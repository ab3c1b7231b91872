import Foundation
import Testing
import TestSupport

#if canImport(Glibc)
import Glibc
#endif

/// Whose a listening port is: a readiness probe counts an answer only from the process it
/// started (or one of its children), never from another that took the port first.
struct LoopbackTests {
    @Test func aPortIsListenedOnByItsOwnerAndNotByAnotherProcess() throws {
        let (fd, port) = try #require(Loopback.bind())
        defer { close(fd) }
        #expect(!Loopback.isListening(pid: getpid(), port: port), "bound, not yet listening")
        #expect(listen(fd, 1) == 0)
        #expect(Loopback.isListening(pid: getpid(), port: port))
        // Another process (a child of this one, so that it is surely alive) does not hold it.
        let other = Process()
        other.executableURL = URL(fileURLWithPath: "/bin/sleep")
        other.arguments = ["5"]
        try other.run()
        defer { other.terminate() }
        #expect(!Loopback.isListening(pid: other.processIdentifier, port: port))
    }
}
