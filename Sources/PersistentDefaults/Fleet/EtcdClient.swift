import Foundation

/// A small client of etcd 3.4's v3 JSON gateway: range, put, txn and watch, with failover
/// across the members of a cluster.
///
/// Every call blocks the thread it runs on, which is never a Swift concurrency thread: the
/// mirror's own threads call it directly, async callers go through ``offThread(_:)``, which
/// starts a thread per request and resumes a continuation. Each request uses its own curl easy
/// handle.
final class EtcdClient: Sendable {
    /// Base URLs, `http://host:port`, without a trailing slash.
    let endpoints: [String]
    /// The index of the endpoint that answered last: tried first next time.
    private let preferred = Locked<Int>(0)
    let requestTimeout: Duration
    let connectTimeout: Duration
    /// The longest pause between two rounds over the endpoints.
    let maxBackoff: Duration

    /// Validates the endpoints: each an `http://host:port` URL (the gateway without TLS).
    init(endpoints: [String], requestTimeout: Duration, connectTimeout: Duration, maxBackoff: Duration)
        throws(EtcdMirrorError)
    {
        guard !endpoints.isEmpty else { throw .invalidEndpoint("", reason: "at least one endpoint is needed") }
        var normalized: [String] = []
        for endpoint in endpoints {
            let trimmed = endpoint.hasSuffix("/") ? String(endpoint.dropLast()) : endpoint
            guard let url = URL(string: trimmed), url.scheme == "http", let host = url.host, !host.isEmpty,
                url.path.isEmpty, url.query == nil
            else {
                throw .invalidEndpoint(endpoint, reason: "expected http://HOST:PORT (etcd's client URL, without TLS)")
            }
            normalized.append(trimmed)
        }
        self.endpoints = normalized
        self.requestTimeout = requestTimeout
        self.connectTimeout = connectTimeout
        self.maxBackoff = maxBackoff
    }

    private static let encoder = JSONEncoder()
    private static let decoder = JSONDecoder()

    /// The endpoint to try first.
    var preferredIndex: Int { preferred.withLock { $0 } }

    /// Runs `body` on a new thread and returns its result: blocking curl calls never occupy a
    /// Swift concurrency thread.
    static func offThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread { continuation.resume(with: Result { try body() }) }
            thread.name = "PersistentDefaults.etcd-request"
            thread.start()
        }
    }

    // MARK: Calls

    /// The keys starting with `prefix` at `revision` (0: the newest, linearizable).
    func range(prefix: [UInt8], revision: Int64 = 0) throws -> EtcdRangeResponse {
        let request = EtcdRangeRequest(
            key: Data(prefix), rangeEnd: Data(etcdRangeEnd(ofPrefix: prefix)), revision: revision)
        return try call("/v3/kv/range", request, safeToRepeat: true)
    }

    /// Stores `value` under `key` and returns the revision of the put.
    func put(key: [UInt8], value: [UInt8]) throws -> Int64 {
        // Repeating a put after a lost answer stores the same value again: harmless.
        let response: EtcdHeaderResponse = try call(
            "/v3/kv/put", EtcdPutRequest(key: Data(key), value: Data(value)), safeToRepeat: true)
        return response.header.revision
    }

    /// Runs a transaction; never sent twice (``EtcdMirrorError/outcomeUnknown(reason:)``).
    func txn(_ request: EtcdTxnRequest) throws -> EtcdTxnResponse {
        try call("/v3/kv/txn", request, safeToRepeat: false)
    }

    /// POSTs `request` to `path`, trying the endpoints in turn, from the one that answered last,
    /// with a growing pause between rounds, until one answers or `requestTimeout` passed.
    ///
    /// A request that may have reached a member whose answer was lost is sent again only when
    /// `safeToRepeat`; etcd's "no leader" refusal is made before anything is proposed, so it is
    /// always retried on another member.
    func call<Request: Encodable, Response: Decodable>(
        _ path: String, _ request: Request, safeToRepeat: Bool
    ) throws -> Response {
        let body: [UInt8]
        do {
            body = Array(try Self.encoder.encode(request))
        } catch {
            throw EtcdMirrorError.etcd(code: 3, message: "the request could not be encoded: \(error)")
        }
        let deadline = ContinuousClock.now + requestTimeout
        var backoff = Duration.milliseconds(25)
        var reasons: [String] = []
        let first = preferredIndex
        // A member that hangs (it accepts the connection and never answers) must not take the
        // whole timeout: a request that may be sent again gives each endpoint its share of it.
        let share = safeToRepeat ? requestTimeout / endpoints.count : requestTimeout
        while true {
            for offset in endpoints.indices {
                let index = (first + offset) % endpoints.count
                let endpoint = endpoints[index]
                let remaining = deadline - ContinuousClock.now
                let limits = HTTPTransfer.Limits(
                    timeout: max(min(remaining, share), .milliseconds(50)),
                    connectTimeout: min(connectTimeout, max(remaining, .milliseconds(50))))
                switch HTTPTransfer.post(url: endpoint + path, body: body, limits: limits) {
                case .failure(let failure):
                    reasons.append("\(endpoint): \(failure.message)")
                    guard failure.certainlyNotSent || safeToRepeat else {
                        throw EtcdMirrorError.outcomeUnknown(reason: "\(endpoint): \(failure.message)")
                    }
                case .success(let response) where response.status == 200:
                    do {
                        let decoded = try Self.decoder.decode(Response.self, from: Data(response.body))
                        preferred.withLock { $0 = index }
                        return decoded
                    } catch {
                        throw EtcdMirrorError.etcd(
                            code: 13, message: "\(endpoint) answered something that is not a \(Response.self): \(error)"
                        )
                    }
                case .success(let response):
                    let refusal = try? Self.decoder.decode(EtcdErrorBody.self, from: Data(response.body))
                    let message = refusal?.message ?? refusal?.error ?? "HTTP status \(response.status)"
                    let code = refusal?.code ?? 2
                    if message.contains("required revision has been compacted") { throw EtcdCompacted() }
                    // gRPC Unavailable: the member cannot serve now (no leader, stopping, timed out).
                    guard code == 14 || response.status == 503 else {
                        throw EtcdMirrorError.etcd(code: code, message: message)
                    }
                    reasons.append("\(endpoint): \(message)")
                    guard safeToRepeat || message.contains("no leader") else {
                        throw EtcdMirrorError.outcomeUnknown(reason: "\(endpoint): \(message)")
                    }
                }
                if ContinuousClock.now >= deadline { break }
            }
            let now = ContinuousClock.now
            guard now + backoff < deadline else {
                throw EtcdMirrorError.unavailable(
                    endpoints: endpoints, reason: reasons.suffix(endpoints.count).joined(separator: "; "))
            }
            Thread.sleep(forTimeInterval: backoff / .seconds(1))
            backoff = min(backoff * 2, maxBackoff)
        }
    }

    // MARK: Watch

    /// Why a watch connection ended.
    enum WatchEnd: Sendable {
        /// `stop` was asked for.
        case stopped
        /// The connection failed or the server ended the stream; reconnect (elsewhere).
        case failed(String)
        /// The start revision was compacted away: re-read the prefix.
        case compacted(Int64)
    }

    /// Watches the keys under `prefix` from `startRevision` on the endpoint `index`, calling
    /// `onResult` with each response in order on this thread, until the connection ends,
    /// `onResult` returns false or `shouldStop()` holds (checked when `wake` is woken).
    func watch(
        endpointIndex index: Int, prefix: [UInt8], startRevision: Int64, wake: WakeHandle,
        shouldStop: () -> Bool, onResult: @escaping (EtcdWatchMessage.Result) -> Bool
    ) -> WatchEnd {
        let create = EtcdWatchCreate(
            key: Data(prefix), rangeEnd: Data(etcdRangeEnd(ofPrefix: prefix)), startRevision: startRevision)
        guard let body = try? Self.encoder.encode(create) else { return .failed("the watch request does not encode") }
        var pending: [UInt8] = []
        // How many bytes at the start of `pending` hold no newline: each byte is searched once. A
        // catch-up response of many revisions is one line of tens of MB, arriving in 16 KB
        // chunks; searching it from its start on every chunk took minutes.
        var searched = 0
        var end: WatchEnd?
        let outcome = HTTPTransfer.stream(
            url: endpoints[index] + "/v3/watch", body: Array(body),
            limits: HTTPTransfer.Limits(timeout: .zero, connectTimeout: connectTimeout), wake: wake,
            pollInterval: .seconds(1), shouldStop: shouldStop
        ) { chunk in
            pending.append(contentsOf: chunk)
            // The gateway ends every message with a newline.
            while let newline = pending[searched...].firstIndex(of: 0x0A) {
                let line = pending[..<newline]
                defer {
                    pending.removeSubrange(...newline)
                    searched = 0
                }
                guard !line.isEmpty else { continue }
                guard let message = try? Self.decoder.decode(EtcdWatchMessage.self, from: Data(line)) else {
                    end = .failed(
                        "a watch message does not parse: \(String(decoding: line.prefix(200), as: UTF8.self))")
                    return false
                }
                guard let result = message.result else {
                    end = .failed("the watch failed: \(message.error?.message ?? "an error without a message")")
                    return false
                }
                if result.compactRevision > 0 {
                    end = .compacted(result.compactRevision)
                    return false
                }
                if result.canceled {
                    end = .failed("the watch was canceled: \(result.cancelReason)")
                    return false
                }
                guard onResult(result) else {
                    end = .stopped
                    return false
                }
            }
            searched = pending.count
            return true
        }
        if let end { return end }
        switch outcome {
        case .success(let response):
            return .failed("the member ended the watch (HTTP status \(response.status))")
        case .failure(let failure):
            return failure.code == 0 ? .stopped : .failed("\(endpoints[index]): \(failure.message)")
        }
    }

    /// Makes `index` the endpoint tried first.
    func prefer(_ index: Int) { preferred.withLock { $0 = index % endpoints.count } }
}
