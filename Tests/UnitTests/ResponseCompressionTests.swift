@testable import HTTPSupport
import Testing

/// Which `Accept-Encoding` takes gzip: by name or `*`, never at weight zero, a refusal by
/// name winning over `*`, over one or several header fields.
@Suite struct ResponseCompressionTests {
    @Test func gzipIsTakenWhenTheRequestTakesItAndNotOtherwise() {
        for taken in [["gzip"], ["deflate, gzip, br, zstd"], ["GZip;q=0.5"], ["*"], ["br", "gzip"], ["x-gzip"], ["identity, *;q=0.1"]] {
            #expect(ResponseCompression.takesGzip(taken), "\(taken)")
        }
        for refused in [[], [""], ["identity"], ["br, zstd"], ["gzip;q=0"], ["gzip;q=0, *"], ["*;q=0"], ["gzip;q=0.000"], ["gzip;q=0", "*"]] {
            #expect(!ResponseCompression.takesGzip(refused), "\(refused)")
        }
    }
}
