import Foundation
import NIOCore

/// How a service ends when it cannot start or stops on an error: one line an operator can
/// act on, on standard error, and exit status 1 — not a crash with its backtrace.
public enum ServiceExit {
    /// Runs the service's `body`; an error it throws ends the process that way.
    public static func run(_ service: String, port: Int, _ body: @Sendable () async throws -> Void) async {
        do {
            try await body()
        } catch {
            FileHandle.standardError.write(Data("\(service): \(reason(error, port: port))\n".utf8))
            exit(1)
        }
    }

    /// The line for `error`: a taken port is named, anything else speaks for itself.
    public static func reason(_ error: any Error, port: Int) -> String {
        if let error = error as? IOError, error.errnoCode == EADDRINUSE {
            return "port \(port) is already in use: stop what listens there, or set PORT to another port"
        }
        return String(describing: error)
    }
}
