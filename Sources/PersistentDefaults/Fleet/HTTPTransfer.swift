import CCurl
import Foundation

/// A libcurl easy handle (`CURL *`): one per request, created and cleaned up in one scope.
typealias CurlHandle = UnsafeMutableRawPointer
/// A libcurl multi handle (`CURLM *`), used only to make a long-running watch interruptible.
typealias CurlMultiHandle = UnsafeMutableRawPointer

/// Why an HTTP exchange with etcd did not produce a response.
struct HTTPFailure: Error, Sendable, CustomStringConvertible {
    /// libcurl's result code (`CURLcode`), or 0 when the exchange was stopped on purpose.
    var code: Int32
    var message: String

    /// Whether the request certainly never reached the server (no connection was made), so that
    /// sending it again cannot apply it twice.
    var certainlyNotSent: Bool {
        code == Int32(CURLE_COULDNT_CONNECT.rawValue) || code == Int32(CURLE_COULDNT_RESOLVE_HOST.rawValue)
            || code == Int32(CURLE_UNSUPPORTED_PROTOCOL.rawValue) || code == Int32(CURLE_URL_MALFORMAT.rawValue)
    }

    var description: String { "\(message) (libcurl code \(code))" }
}

/// A response: the HTTP status and the body.
struct HTTPResponse: Sendable {
    var status: Int
    var body: [UInt8]
}

/// Blocking HTTP POSTs through libcurl. Every call runs on a thread the caller owns — never on a
/// Swift concurrency thread (``EtcdClient`` starts one per request) — and uses its own easy
/// handle, so no handle is ever shared between threads (libcurl: "You must never share the same
/// handle in multiple threads").
enum HTTPTransfer {
    /// curl_global_init: "you must not call it when any other thread in the program is running",
    /// and once; a `static let` is initialised once, thread-safely, before the first transfer.
    private static let globalSetup: CURLcode = curl_global_init(Int(CURL_GLOBAL_DEFAULT))

    /// The bytes a transfer received, appended by the write callback.
    ///
    /// `@unchecked Sendable`: owned by the one thread that runs the transfer; libcurl calls the
    /// write callback on that thread, inside `curl_easy_perform` / `curl_multi_perform`.
    final class Sink: @unchecked Sendable {
        /// The whole body, for a request; a stream's chunks go to `onData` instead.
        var bytes: [UInt8] = []
        /// Called with each chunk received; returns false to stop the transfer.
        var onData: ((UnsafeBufferPointer<UInt8>) -> Bool)?
        var stopped = false

        /// The write callback's work: returns false to make libcurl abort the transfer.
        func receive(_ pointer: UnsafePointer<CChar>, _ count: Int) -> Bool {
            pointer.withMemoryRebound(to: UInt8.self, capacity: count) { start in
                let chunk = UnsafeBufferPointer(start: start, count: count)
                guard let onData else {
                    bytes.append(contentsOf: chunk)
                    return true
                }
                if !onData(chunk) { stopped = true }
                return !stopped
            }
        }
    }

    /// The write callback: returning fewer bytes than received aborts the transfer (CURLE_WRITE_ERROR).
    private static let writeCallback:
        @convention(c) (UnsafeMutablePointer<CChar>?, Int, Int, UnsafeMutableRawPointer?)
            -> Int = { pointer, size, count, context in
                guard let pointer, let context else { return 0 }
                let sink = Unmanaged<Sink>.fromOpaque(context).takeUnretainedValue()
                return sink.receive(pointer, size * count) ? size * count : 0
            }

    /// Options of one transfer.
    struct Limits: Sendable {
        /// For the whole exchange; 0 means none (a watch).
        var timeout: Duration
        var connectTimeout: Duration
    }

    /// POSTs `body` as JSON to `url` and returns the response; blocks until it is complete.
    static func post(url: String, body: [UInt8], limits: Limits) -> Result<HTTPResponse, HTTPFailure> {
        withEasyHandle(url: url, body: body, limits: limits) { handle, sink in
            let code = curl_easy_perform(handle)
            return finish(handle, code: code, sink: sink)
        }
    }

    /// POSTs `body` and passes the bytes to `onData` as they arrive, until the
    /// server ends the response, the connection fails, `onData` returns false, or `shouldStop`
    /// (checked whenever `wake` is called and at least every `pollInterval`) says so.
    ///
    /// The transfer runs in a multi handle so that another thread can interrupt the wait
    /// through `WakeHandle.wake()` (curl_multi_wakeup, "thread-safe").
    static func stream(
        url: String, body: [UInt8], limits: Limits, wake: WakeHandle, pollInterval: Duration,
        shouldStop: () -> Bool, onData: @escaping (UnsafeBufferPointer<UInt8>) -> Bool
    ) -> Result<HTTPResponse, HTTPFailure> {
        withEasyHandle(url: url, body: body, limits: limits) { handle, sink in
            sink.onData = onData
            guard let multi = curl_multi_init() else {
                return .failure(
                    HTTPFailure(code: Int32(CURLE_OUT_OF_MEMORY.rawValue), message: "curl_multi_init failed"))
            }
            wake.attach(multi)
            // curl_multi_cleanup: "remove all easy handles … before cleaning up the multi handle".
            defer {
                wake.detach()
                curl_multi_remove_handle(multi, handle)
                curl_multi_cleanup(multi)
            }
            curl_multi_add_handle(multi, handle)
            let pollMilliseconds = Int32(pollInterval / .milliseconds(1))
            var running: Int32 = 1
            while running > 0 {
                if shouldStop() { return .failure(HTTPFailure(code: 0, message: "stopped")) }
                let performed = curl_multi_perform(multi, &running)
                guard performed == CURLM_OK else {
                    return .failure(
                        HTTPFailure(
                            code: Int32(performed.rawValue), message: String(cString: curl_multi_strerror(performed))))
                }
                guard running > 0 else { break }
                // Waits for traffic, a timeout of libcurl's, a wake-up or the poll interval.
                curl_multi_poll(multi, nil, 0, pollMilliseconds, nil)
            }
            var remaining: Int32 = 0
            var result = CURLE_OK
            while let message = curl_multi_info_read(multi, &remaining) {
                if message.pointee.msg == CURLMSG_DONE { result = message.pointee.data.result }
            }
            if sink.stopped { return .failure(HTTPFailure(code: 0, message: "stopped")) }
            return finish(handle, code: result, sink: sink)
        }
    }

    private static func finish(_ handle: CurlHandle, code: CURLcode, sink: Sink) -> Result<HTTPResponse, HTTPFailure> {
        guard code == CURLE_OK else {
            return .failure(HTTPFailure(code: Int32(code.rawValue), message: String(cString: curl_easy_strerror(code))))
        }
        var status = 0
        // Cannot fail for CURLINFO_RESPONSE_CODE on a completed transfer; 0 then reads as "no status".
        _ = pd_curl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status)
        return .success(HTTPResponse(status: status, body: sink.bytes))
    }

    /// Creates an easy handle set up for a JSON POST, runs `body` with it and cleans it up on
    /// every path (curl_easy_cleanup: "This might close all connections this handle has used").
    private static func withEasyHandle(
        url: String, body: [UInt8], limits: Limits,
        _ run: (CurlHandle, Sink) -> Result<HTTPResponse, HTTPFailure>
    ) -> Result<HTTPResponse, HTTPFailure> {
        guard globalSetup == CURLE_OK else {
            return .failure(HTTPFailure(code: Int32(globalSetup.rawValue), message: "curl_global_init failed"))
        }
        guard let handle = curl_easy_init() else {
            return .failure(HTTPFailure(code: Int32(CURLE_FAILED_INIT.rawValue), message: "curl_easy_init failed"))
        }
        defer { curl_easy_cleanup(handle) }
        let sink = Sink()
        let headers = curl_slist_append(nil, "Content-Type: application/json")
        defer { curl_slist_free_all(headers) }
        return url.withCString { url in
            body.withUnsafeBytes { bodyBytes in
                // Return codes of setopt are CURLE_OK for these options on any libcurl with HTTP
                // support (CURLE_UNKNOWN_OPTION only for unknown options); a failure shows up as
                // an error of the transfer itself.
                _ = pd_curl_setopt_string(handle, CURLOPT_URL, url)
                _ = pd_curl_setopt_long(handle, CURLOPT_NOSIGNAL, 1)  // No SIGALRM in a threaded process.
                _ = pd_curl_setopt_long(handle, CURLOPT_POST, 1)
                _ = pd_curl_setopt_pointer(
                    handle, CURLOPT_POSTFIELDS, UnsafeMutableRawPointer(mutating: bodyBytes.baseAddress))
                _ = pd_curl_setopt_long(handle, CURLOPT_POSTFIELDSIZE, bodyBytes.count)
                _ = pd_curl_setopt_list(handle, CURLOPT_HTTPHEADER, headers)
                _ = pd_curl_setopt_long(handle, CURLOPT_TIMEOUT_MS, Int(limits.timeout / .milliseconds(1)))
                _ = pd_curl_setopt_long(
                    handle, CURLOPT_CONNECTTIMEOUT_MS, max(1, Int(limits.connectTimeout / .milliseconds(1))))
                // A member that vanishes without closing the connection is noticed by TCP keep-alive.
                _ = pd_curl_setopt_long(handle, CURLOPT_TCP_KEEPALIVE, 1)
                _ = pd_curl_setopt_long(handle, CURLOPT_TCP_KEEPIDLE, 10)
                _ = pd_curl_setopt_long(handle, CURLOPT_TCP_KEEPINTVL, 5)
                _ = pd_curl_setopt_write_function(handle, writeCallback)
                let context = Unmanaged.passRetained(sink)
                defer { context.release() }
                _ = pd_curl_setopt_pointer(handle, CURLOPT_WRITEDATA, context.toOpaque())
                return run(handle, sink)
            }
        }
    }
}

/// Lets another thread interrupt a streaming transfer's wait (curl_multi_wakeup).
///
/// `@unchecked Sendable`: the multi handle is set and cleared under `lock`, and only passed to
/// curl_multi_wakeup under it, which libcurl documents as callable from any thread; the handle
/// is cleaned up only after `detach()` returned, so a wake never meets a freed handle.
final class WakeHandle: @unchecked Sendable {
    /// The multi handle's address (a pointer is not `Sendable`), 0 when none is attached.
    private let lock = Locked<UInt>(0)

    func attach(_ multi: CurlMultiHandle) { lock.withLock { $0 = UInt(bitPattern: multi) } }
    func detach() { lock.withLock { $0 = 0 } }

    /// Wakes the transfer's thread if it is waiting; harmless otherwise.
    func wake() {
        lock.withLock { address in
            // Fails only for a bad handle, which `detach` rules out.
            if let multi = CurlMultiHandle(bitPattern: address) { _ = curl_multi_wakeup(multi) }
        }
    }
}
