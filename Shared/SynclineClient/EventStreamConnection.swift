import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A live stream from the fanout over SSE: delivers each message's JSON and ends when
/// the connection does.
final class EventStreamConnection: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    // @unchecked: the delegate queue is serial; `parser` and `continuation` are touched only there.
    private var parser = ServerSentEvents()
    private let continuation: AsyncThrowingStream<String, any Error>.Continuation
    let messages: AsyncThrowingStream<String, any Error>
    private var session: URLSession?
    private var task: URLSessionDataTask?

    init(url: URL, token: String) {
        (messages, continuation) = AsyncThrowingStream.makeStream(of: String.self)
        super.init()
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        let configuration = URLSessionConfiguration.default
        configuration.timeoutIntervalForRequest = 24 * 3600
        configuration.timeoutIntervalForResource = 24 * 3600
        let session = URLSession(configuration: configuration, delegate: self, delegateQueue: queue)
        var request = URLRequest(url: url)
        request.setValue("text/event-stream", forHTTPHeaderField: "Accept")
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        self.session = session
        task = session.dataTask(with: request)
        task?.resume()
    }

    /// Ends the stream for its reader at once. The connection itself is cancelled on a
    /// queue of its own: on Linux `URLSessionTask.cancel` can deadlock (see
    /// `AbandonOnCancel`), and whoever stops the client must never wait for it.
    func cancel() {
        continuation.finish()
        let task = self.task, session = self.session
        DispatchQueue.global(qos: .utility).async {
            task?.cancel()
            session?.invalidateAndCancel()
        }
    }

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping (URLSession.ResponseDisposition) -> Void
    ) {
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        if status == 200 {
            completionHandler(.allow)
        } else {
            continuation.finish(throwing: ClientError.server(status: status, detail: "stream refused"))
            completionHandler(.cancel)
        }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        for message in parser.feed(data) { continuation.yield(message) }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        if let error { continuation.finish(throwing: error) } else { continuation.finish() }
    }
}
