import Foundation
import TestSupport

/// A command run in the background by `/bin/sh -c`: a helper server a test starts (the
/// static file server, the OTLP receiver). `stop()`, or its release, kills it.
final class ShellProcess: @unchecked Sendable {
    // @unchecked: `pid` is written once in init and cleared by `stop`, from one test.
    private var pid: pid_t = 0

    /// Starts `command`; `what` names it in the error when it cannot start.
    init(_ command: String, what: String) throws {
        let arguments = ["/bin/sh", "-c", command]
        let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        guard posix_spawn(&pid, "/bin/sh", nil, nil, argv, environ) == 0 else { throw StackError(description: "cannot start \(what)") }
    }

    func stop() {
        guard pid != 0 else { return }
        kill(pid, SIGKILL)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        pid = 0
    }

    deinit { stop() }
}
