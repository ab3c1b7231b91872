import Crypto
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import SyncModels

/// Attachments: files put in record data as a `BlobRef`, uploaded before the ops that
/// reference them (those wait; the others go on), read back as local files.
extension SyncClient {
    /// Files up to this size are uploaded in one `PUT`; larger ones with tus, in pieces,
    /// resumed where they stopped after a lost connection or a restart.
    static let resumableUploadThreshold: Int64 = 4 << 20
    static let uploadPieceBytes = 4 << 20
    static let downloadPieceBytes: Int64 = 4 << 20
    /// How long a download waits out 429s (the user's downloads at once) before it fails.
    static let downloadWaitLimit: Double = 60

    /// Keeps `data` as a file of this device's and queues its upload; put the returned
    /// reference (`ref.json`) anywhere in a record's data. Works offline.
    public func attach(data: Data, contentType: String) throws -> BlobRef {
        let reference = BlobRef(sha256: Hex.string(SHA256.hash(data: data)), size: Int64(data.count), contentType: contentType)
        try checkAttachment(reference)
        try place(reference) { temporary in try data.write(to: temporary) }
        return reference
    }

    /// Copies the file at `fileURL` into the client's own folder (the original may go
    /// afterwards) and queues its upload. Read and hashed in pieces: any size fits.
    public func attach(fileURL: URL, contentType: String) throws -> BlobRef {
        let input = try FileHandle(forReadingFrom: fileURL)
        defer { try? input.close() }
        try FileManager.default.createDirectory(at: store.blobFolder, withIntermediateDirectories: true)
        let temporary = store.blobFolder.appendingPathComponent("incoming-\(UUID().uuidString)")
        FileManager.default.createFile(atPath: temporary.path, contents: nil)
        let output = try FileHandle(forWritingTo: temporary)
        var hasher = SHA256()
        var size: Int64 = 0
        do {
            while let piece = try input.read(upToCount: 1 << 20), !piece.isEmpty {
                hasher.update(data: piece)
                try output.write(contentsOf: piece)
                size += Int64(piece.count)
            }
            try output.synchronize()
            try output.close()
        } catch {
            try? output.close()
            try? FileManager.default.removeItem(at: temporary)
            throw error
        }
        let reference = BlobRef(sha256: Hex.string(hasher.finalize()), size: size, contentType: contentType)
        do {
            try checkAttachment(reference)
            try place(reference) { destination in try FileManager.default.moveItem(at: temporary, to: destination) }
        } catch {
            try? FileManager.default.removeItem(at: temporary)
            throw error
        }
        return reference
    }

    func checkAttachment(_ reference: BlobRef) throws {
        if store.spaceGone { throw ClientError.spaceGone }
        guard BlobReference.isValidContentType(reference.contentType) else {
            throw ClientError.invalidOp(detail: "content type \(reference.contentType) is not a media type such as image/jpeg")
        }
    }

    /// Puts the file in the folder under its hash (written by `write` to a temporary name,
    /// then renamed: a file there is whole) and records it as this device's own.
    func place(_ reference: BlobRef, write: (URL) throws -> Void) throws {
        let destination = store.blobFile(reference.sha256)
        try FileManager.default.createDirectory(at: store.blobFolder, withIntermediateDirectories: true)
        if !FileManager.default.fileExists(atPath: destination.path) {
            let temporary = store.blobFolder.appendingPathComponent("incoming-\(UUID().uuidString)")
            try write(temporary)
            try FileManager.default.moveItem(at: temporary, to: destination)
        }
        try store.addOwnBlob(reference, now: configuration.now())
        statusChanged()
        wake()
    }

    /// The file as a local URL: at once when this device holds it (its own, or downloaded
    /// before), else downloaded now — in ranges, checked against its hash — into a cache
    /// kept under `blobCacheBytes`, least recently used out first.
    public func blob(_ reference: BlobRef) async throws -> URL {
        let file = store.blobFile(reference.sha256)
        if try store.localBlob(reference.sha256) != nil, FileManager.default.fileExists(atPath: file.path) {
            try store.touchBlob(reference.sha256, now: configuration.now())
            return file
        }
        try FileManager.default.createDirectory(at: store.blobFolder, withIntermediateDirectories: true)
        let temporary = store.blobFolder.appendingPathComponent("download-\(UUID().uuidString)")
        FileManager.default.createFile(atPath: temporary.path, contents: nil)
        do {
            let output = try FileHandle(forWritingTo: temporary)
            defer { try? output.close() }
            var hasher = SHA256()
            var received: Int64 = 0
            let path = "/v1/blobs/\(reference.sha256)" + (configuration.spaceID.map { "?space_id=\($0)" } ?? "")
            repeat {
                let last = min(received + Self.downloadPieceBytes, reference.size) - 1
                let headers = reference.size > 0 ? ["Range": "bytes=\(received)-\(last)"] : [:]
                var answer = try await api.send("GET", path, headers: headers)
                // Too many downloads of this user's at once (an app fetching a screenful of
                // pictures): wait as told and ask again.
                var waited = 0.0
                while answer.status == 429, waited < Self.downloadWaitLimit {
                    let pause = min(answer.retryAfter ?? 1, Self.downloadWaitLimit - waited)
                    try await Task.sleep(for: .seconds(pause))
                    waited += pause
                    answer = try await api.send("GET", path, headers: headers)
                }
                guard answer.status == 206 || answer.status == 200 else {
                    throw ClientError.server(status: answer.status, detail: answer.detail)
                }
                hasher.update(data: answer.body)
                try output.write(contentsOf: answer.body)
                received += Int64(answer.body.count)
                if answer.status == 200 || answer.body.isEmpty { break }
            } while received < reference.size
            try output.synchronize()
            guard Hex.string(hasher.finalize()) == reference.sha256 else {
                throw ClientError.server(status: 200, detail: "the file downloaded does not match its hash")
            }
            try FileManager.default.moveItem(at: temporary, to: file)
        } catch {
            try? FileManager.default.removeItem(at: temporary)
            if FileManager.default.fileExists(atPath: file.path) == false { throw error }
        }
        try store.addDownloadedBlob(reference, now: configuration.now())
        _ = try store.evictBlobs(maxBytes: configuration.blobCacheBytes)
        return file
    }

    // MARK: - Uploads, in the sync pass

    /// Uploads every file waiting, oldest first. A file the server refuses sets aside the
    /// ops referencing it; one that fails for now (network, 5xx) is left for the next pass
    /// and holds back only the ops from its first referencing op on. Returns the reason of
    /// the first such failure.
    func uploadPending() async throws -> Retry? {
        for (opID, reason) in try store.setAsideOpsOfRefusedBlobs() {
            eventSink.yield(.setAside(opID: opID, reason: reason))
        }
        var failure: Retry?
        for blob in try store.pendingBlobs() {
            let file = store.blobFile(blob.reference.sha256)
            guard FileManager.default.fileExists(atPath: file.path) else {
                try refuse(blob.reference, reason: "the file is no longer on this device")
                continue
            }
            do {
                let answer = blob.reference.size > Self.resumableUploadThreshold
                    ? try await uploadResumably(blob, file: file)
                    : try await uploadWhole(blob.reference, file: file)
                switch answer.status {
                case 200, 201, 204:
                    try store.blobUploaded(blob.reference.sha256)
                    eventSink.yield(.uploaded(sha256: blob.reference.sha256))
                case 413, 422:
                    try refuse(blob.reference, reason: answer.detail)
                default:
                    failure = failure ?? .answered("upload", answer)
                }
            } catch {
                failure = failure ?? .unreachable("upload", error)
            }
            statusChanged()
        }
        return failure
    }

    func refuse(_ reference: BlobRef, reason: String) throws {
        let opIDs = try store.blobRefused(reference.sha256, reason: reason)
        eventSink.yield(.uploadRefused(sha256: reference.sha256, reason: reason))
        for opID in opIDs { eventSink.yield(.setAside(opID: opID, reason: reason)) }
        notifyAll()
    }

    var spaceQuery: String { configuration.spaceID.map { "?space_id=\($0)" } ?? "" }

    func uploadWhole(_ reference: BlobRef, file: URL) async throws -> ServerAPI.Answer {
        let data = try Data(contentsOf: file)
        eventSink.yield(.uploadProgress(sha256: reference.sha256, sent: 0, total: reference.size))
        let answer = try await api.send(
            "PUT", "/v1/blobs/\(reference.sha256)\(spaceQuery)", body: data, headers: ["Content-Type": reference.contentType])
        if answer.status == 200 || answer.status == 201 {
            eventSink.yield(.uploadProgress(sha256: reference.sha256, sent: reference.size, total: reference.size))
        }
        return answer
    }

    /// tus: the upload begun before (its URL is kept in the store) is asked where it
    /// stands and resumed; else one is created. Pieces of 4 MiB, each a `PATCH`. A `PATCH`
    /// answered 409 (the server holds another offset: an earlier piece arrived though its
    /// answer was lost) or cut off asks `HEAD` where the upload stands and goes on from
    /// there, as tus says, rather than starting again from byte 0.
    func uploadResumably(_ blob: LocalStore.LocalBlob, file: URL) async throws -> ServerAPI.Answer {
        let reference = blob.reference
        let tus = ["Tus-Resumable": "1.0.0"]
        var location = blob.uploadURL
        var offset: Int64 = 0
        if let known = location {
            if let at = try await uploadOffset(known) { offset = at } else { location = nil }
        }
        if location == nil {
            func base64(_ text: String) -> String { Data(text.utf8).base64EncodedString() }
            var metadata = "sha256 \(base64(reference.sha256)),content_type \(base64(reference.contentType))"
            if let space = configuration.spaceID { metadata += ",space_id \(base64(space))" }
            let created = try await api.send("POST", "/v1/uploads", headers: tus.merging([
                "Upload-Length": String(reference.size), "Upload-Metadata": metadata]) { $1 })
            guard created.status == 201, let url = created.header("Location") else { return created }
            location = url
            try store.setUploadURL(reference.sha256, url)
        }
        guard let location else { throw ClientError.server(status: 0, detail: "no upload location") }
        let input = try FileHandle(forReadingFrom: file)
        defer { try? input.close() }
        try input.seek(toOffset: UInt64(offset))
        var last = ServerAPI.Answer(status: 204, headers: [:], body: Data())
        var resyncs = 0
        while offset < reference.size {
            eventSink.yield(.uploadProgress(sha256: reference.sha256, sent: offset, total: reference.size))
            let piece = try input.read(upToCount: Self.uploadPieceBytes) ?? Data()
            var cut: (any Error)?
            do {
                last = try await api.send("PATCH", location, body: piece, headers: tus.merging([
                    "Upload-Offset": String(offset), "Content-Type": "application/offset+octet-stream"]) { $1 })
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                cut = error
            }
            // Cut off (the piece may have arrived) or 409: where the upload stands says.
            if cut != nil || last.status == 409 {
                if resyncs < Self.uploadResyncs, let at = try await uploadOffset(location) {
                    resyncs += 1
                    offset = at
                    try input.seek(toOffset: UInt64(offset))
                    continue
                }
                if let cut { throw cut }
            }
            guard last.status == 204, let at = last.header("Upload-Offset").flatMap(Int64.init) else {
                if last.status == 404 || last.status == 409 { try store.setUploadURL(reference.sha256, nil) }
                return last
            }
            offset = at
            try input.seek(toOffset: UInt64(offset))
        }
        eventSink.yield(.uploadProgress(sha256: reference.sha256, sent: reference.size, total: reference.size))
        return last
    }
}

extension SyncClient {
    /// How often one upload asks where it stands after a 409 or a cut, before it gives up for this pass.
    static let uploadResyncs = 3

    /// Where the upload at `location` stands (`HEAD`), or nil when the server no longer has it.
    func uploadOffset(_ location: String) async throws -> Int64? {
        let head = try await api.send("HEAD", location, headers: ["Tus-Resumable": "1.0.0"])
        return head.status == 200 ? head.header("Upload-Offset").flatMap(Int64.init) : nil
    }
}

/// A file referenced from record data (`ref.json` is what goes in the data).
public typealias BlobRef = BlobReference
