#if canImport(Glibc)
import Glibc
#endif

/// The files a process may hold open: every stream, connection and open file is one.
public enum DescriptorLimit {
    /// Raises this process's soft limit on open files to its hard limit, as nginx's
    /// `worker_rlimit_nofile` and Go's runtime do, and answers the limit now in force. A
    /// service holding a socket per stream must not stop at the soft limit a shell or an
    /// init system starts it with (often 1,024) when its hard limit allows far more.
    @discardableResult
    public static func raiseToHardLimit() -> UInt64 {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 0 }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
        }
        return UInt64(limit.rlim_cur)
    }

    /// The most open files this process may be allowed: its hard limit, which
    /// `raiseToHardLimit` raises the soft one to.
    public static var hardLimit: UInt64 {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 0 }
        return UInt64(limit.rlim_max)
    }

    /// Raises the hard limit to `wanted` first when it is lower — which only a privileged
    /// process may do (the load generator, run as root to hold tens of thousands of
    /// sockets) — then the soft limit to the hard one. Answers the limit now in force.
    @discardableResult
    public static func raise(to wanted: UInt64) -> UInt64 {
        var limit = rlimit()
        if getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_max < wanted {
            var raised = limit
            raised.rlim_max = rlim_t(wanted)
            _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised)
        }
        return raiseToHardLimit()
    }
}
