import HTTPSupport
import HTTPTypes
import Testing

/// Which stored files a browser may show inline: only those it displays or plays and never
/// runs.
struct StoredFileHeadersTests {
    @Test(arguments: ["image/png", "image/JPEG", "image/gif; x=1", "image/webp", "audio/mpeg", "video/mp4", " image/avif "])
    func rasterImagesAudioAndVideoAreInline(_ type: String) {
        #expect(StoredFileHeaders.isPassive(type))
    }

    @Test(arguments: [
        "text/html", "image/svg+xml", "application/xhtml+xml", "text/xml", "application/xml", "application/pdf",
        "text/javascript", "application/octet-stream", "text/plain", "multipart/x-mixed-replace", "audio", "video/", "image/svg",
    ])
    func everythingElseIsAnAttachment(_ type: String) {
        #expect(!StoredFileHeaders.isPassive(type))
        var headers = HTTPFields()
        StoredFileHeaders.apply(contentType: type, to: &headers)
        #expect(headers[.contentDisposition] == "attachment")
        #expect(headers[.xContentTypeOptions] == "nosniff")
        #expect(headers[.contentSecurityPolicy] == "default-src 'none'; sandbox")
    }
}
