import Foundation
import HTTPTypes

/// The header fields every stored file is served with, so that no file a user uploaded can
/// run as a page of the origin serving it (which also serves `/admin` and the API):
/// - `X-Content-Type-Options: nosniff`: the browser keeps to the declared type;
/// - `Content-Security-Policy: default-src 'none'; sandbox`: a file opened as a page loads
///   nothing, runs no script and has an origin of its own, so it reads no storage;
/// - `Content-Disposition`: `inline` only for types a browser just displays or plays
///   (raster images, audio, video); every other type, HTML and SVG among them, is
///   `attachment`, saved rather than opened.
public enum StoredFileHeaders {
    public static let contentSecurityPolicy = "default-src 'none'; sandbox"

    /// Raster images, audio and video: a browser displays or plays them and runs nothing.
    /// SVG is an image that can hold script, so it is not one of them.
    static let passiveImages: Set<String> = [
        "image/png", "image/jpeg", "image/gif", "image/webp", "image/avif", "image/bmp", "image/apng",
        "image/x-icon", "image/vnd.microsoft.icon", "image/heic", "image/heif", "image/tiff",
    ]

    /// Whether a file of this type may be shown inline.
    public static func isPassive(_ contentType: String) -> Bool {
        let mediaType = contentType.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false)[0]
            .trimmingCharacters(in: .whitespaces).lowercased()
        if mediaType.hasPrefix("audio/") || mediaType.hasPrefix("video/") {
            return mediaType.split(separator: "/").count == 2
        }
        return passiveImages.contains(mediaType)
    }

    /// Adds the fields above for a file of `contentType`.
    public static func apply(contentType: String, to headers: inout HTTPFields) {
        headers[.xContentTypeOptions] = "nosniff"
        headers[.contentSecurityPolicy] = contentSecurityPolicy
        headers[.contentDisposition] = isPassive(contentType) ? "inline" : "attachment"
    }
}
