import Crypto
import Foundation
import SyncModels

/// Resumable uploads (tus 1.0: create, `HEAD`, `PATCH` at the offset), as the gateway
/// serves the files over 4 MiB clients send this way.
extension FakeBackend {
    struct Upload {
        let space: String
        let user: String
        let sha256: String
        let length: Int
        var data = Data()
    }

    static let tus = ["Tus-Resumable": "1.0.0"]

    /// Answers the uploads routes (nil: not one of them).
    mutating func answerUploads(_ request: FakeRequest, route: String, named: String, user: String) -> FakeAnswer? {
        switch (request.method, route) {
        case ("POST", "/v1/uploads"):
            return createUpload(request, user: user)
        case ("HEAD", "/v1/uploads/:id"):
            guard let upload = uploads[named], upload.user == user else { return FakeAnswer(status: 404, headers: Self.tus) }
            return FakeAnswer(
                status: 200,
                headers: Self.tus.merging(["Upload-Offset": String(upload.data.count), "Upload-Length": String(upload.length),
                                           "Cache-Control": "no-store"]) { $1 })
        case ("PATCH", "/v1/uploads/:id"):
            return appendUpload(request, id: named, user: user)
        default:
            return nil
        }
    }

    mutating func createUpload(_ request: FakeRequest, user: String) -> FakeAnswer {
        var metadata: [String: String] = [:]
        for pair in (request.headers["upload-metadata"] ?? "").split(separator: ",") {
            let parts = pair.trimmingCharacters(in: .whitespaces).split(separator: " ", maxSplits: 1)
            guard let key = parts.first else { continue }
            metadata[String(key)] = parts.count == 2 ? Data(base64Encoded: String(parts[1])).map { String(decoding: $0, as: UTF8.self) } : ""
        }
        guard let length = request.headers["upload-length"].flatMap(Int.init), length >= 0 else {
            return .problem(400, "invalid_request", "Upload-Length must be the file's size in bytes.")
        }
        guard let sha256 = metadata["sha256"], BlobReference.isValidSHA256(sha256) else {
            return .problem(400, "invalid_request", "Upload-Metadata must name the file's sha256.")
        }
        guard let space = space(metadata["space_id"], of: user) else { return .problem(404, "not_found", "No such space.") }
        let id = UUID().uuidString.lowercased()
        uploads[id] = Upload(space: space, user: user, sha256: sha256, length: length)
        return FakeAnswer(status: 201, headers: Self.tus.merging(["Location": "/v1/uploads/\(id)"]) { $1 })
    }

    /// A piece at the upload's offset is appended (another offset is a 409); the last one
    /// stores the file in the space once its bytes hash to its name.
    mutating func appendUpload(_ request: FakeRequest, id: String, user: String) -> FakeAnswer {
        guard var upload = uploads[id], upload.user == user else { return FakeAnswer(status: 404, headers: Self.tus) }
        guard request.headers["upload-offset"].flatMap(Int.init) == upload.data.count else {
            return .problem(409, "offset_mismatch", "The upload stands at \(upload.data.count) bytes.")
        }
        guard upload.data.count + request.body.count <= upload.length else {
            return .problem(413, "too_large", "The piece goes past the upload's length.")
        }
        upload.data.append(request.body)
        uploads[id] = upload
        if upload.data.count == upload.length {
            uploads[id] = nil
            guard Hex.string(SHA256.hash(data: upload.data)) == upload.sha256 else {
                return .problem(422, "hash_mismatch", "The bytes do not hash to \(upload.sha256).")
            }
            spaces[upload.space]?.blobs[upload.sha256] = upload.data
        }
        return FakeAnswer(status: 204, headers: Self.tus.merging(["Upload-Offset": String(upload.data.count)]) { $1 })
    }
}
