import Foundation

/// Commands the tests run on this machine, through `/bin/sh -c`.
///
/// They are started with `posix_spawn` and waited for with `waitpid`, not with Foundation's
/// `Process`: its `waitUntilExit` can hang off the main thread. A call blocks its thread
/// until the command exits; `runOffThePool` waits on a thread of its own, for commands that
/// take seconds (a blocked thread of the cooperative pool stalls the other tests meanwhile).
public enum Shell {
    /// Runs `command`; returns its exit status (127 when it cannot be started).
    @discardableResult
    public static func run(_ command: String) -> Int32 {
        var pid: pid_t = 0
        let arguments: [String] = ["/bin/sh", "-c", command]
        let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        guard posix_spawn(&pid, "/bin/sh", nil, nil, argv, environ) == 0 else { return 127 }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        return (status >> 8) & 0xff
    }

    /// Runs `command` and returns its exit status and standard output (standard error goes
    /// wherever `command` sends it).
    public static func output(_ command: String) -> (status: Int32, output: String) {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("shell-\(UUID().uuidString).out").path
        defer { try? FileManager.default.removeItem(atPath: file) }
        let status = run("{ \(command); } > \(file)")
        return (status, (try? String(contentsOfFile: file, encoding: .utf8)) ?? "")
    }

    /// `output`, waited for on a thread of its own.
    public static func runOffThePool(_ command: String) async -> (status: Int32, output: String) {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: output(command)) }
        }
    }

}
