#if canImport(Glibc)
import Glibc
import ServiceSupport
import Testing

@Suite("Descriptor limit")
struct DescriptorLimitTests {
    @Test func theSoftLimitIsRaisedToTheHardLimit() {
        var before = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &before)
        // One below the hard limit: the rest of the test process keeps all it may need.
        var lowered = before
        lowered.rlim_cur = before.rlim_max - 1
        #expect(setrlimit(Int32(RLIMIT_NOFILE.rawValue), &lowered) == 0)
        defer { setrlimit(Int32(RLIMIT_NOFILE.rawValue), &before) }

        let raised = DescriptorLimit.raiseToHardLimit()

        var after = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &after)
        #expect(raised == UInt64(before.rlim_max))
        #expect(after.rlim_cur == before.rlim_max)
    }
}
#endif
