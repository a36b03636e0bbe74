/// What ``EtcdMirror`` throws.
///
/// ```swift
/// do {
///     try await mirror.set(200, for: .maxConnections)
/// } catch EtcdMirrorError.unavailable(let endpoints, let reason) {
///     print("no etcd member of \(endpoints) answered: \(reason)")
/// }
/// ```
///
/// Writes to a mirrored key that bypass the mirror throw
/// ``PersistentDefaultsError/ownedByMirror(key:localPrefix:etcdPrefix:)`` instead.
public enum EtcdMirrorError: Error, Sendable, Equatable, CustomStringConvertible {
    /// An endpoint is not an `http://host:port` URL.
    case invalidEndpoint(String, reason: String)
    /// A prefix cannot be mirrored: empty, too long, or overlapping another mirror of the store.
    case invalidPrefix(String, reason: String)
    /// The key's name does not start with the mirror's local prefix.
    case keyOutsidePrefix(key: String, localPrefix: String)
    /// No etcd member answered before the deadline (``EtcdMirror/Options/requestTimeout``).
    case unavailable(endpoints: [String], reason: String)
    /// etcd answered with an error; `code` is its gRPC status code.
    case etcd(code: Int, message: String)
    /// A transaction was sent but its answer was lost (the member failed mid-request): it may or
    /// may not have been applied. It is not sent again, since applying it twice could double an
    /// update; read the value and decide.
    case outcomeUnknown(reason: String)
    /// ``EtcdMirror/update(_:_:)`` or ``EtcdMirror/write(_:)`` met a concurrent change of a key
    /// it read on every one of `attempts` tries.
    case tooManyConflicts(attempts: Int)
    /// A transaction holds more operations than etcd accepts (its `--max-txn-ops`, 128 by
    /// default, for the comparisons and the writes apart); nothing was sent. `count` is the larger
    /// of the two: its writes (one per key set or removed) and its comparisons (two per key read
    /// that exists, one per key read that does not). So a ``EtcdMirror/write(_:)`` may set 128
    /// keys and read 64 that exist.
    case tooManyOperations(count: Int, limit: Int)
    /// An ``EtcdMirror/update(_:_:)``, or a ``EtcdMirror/write(_:)`` body, read a key whose value
    /// in etcd (put at `revision`) does not parse or cannot be stored: the local copy keeps its
    /// last good value, and writing from that value would overwrite the operator's. Nothing was
    /// sent. Put a valid value in etcd, or set the key without reading it.
    case unparsableValue(key: String, revision: Int64)
    /// The mirror is not running: ``EtcdMirror/start()`` was not called or did not succeed, or
    /// ``EtcdMirror/stop()`` was.
    case notRunning
    /// A write to etcd succeeded at `revision`, but the mirror did not apply it locally within
    /// the request timeout (etcd became unreachable for this host right after the write).
    case notAppliedLocally(revision: Int64)

    /// A one-line readable message.
    public var description: String {
        switch self {
        case .invalidEndpoint(let endpoint, let reason): "invalid etcd endpoint \"\(endpoint)\": \(reason)"
        case .invalidPrefix(let prefix, let reason): "prefix \"\(prefix)\" cannot be mirrored: \(reason)"
        case .keyOutsidePrefix(let key, let localPrefix):
            "key \"\(key)\" is not mirrored: its name does not start with the mirror's local prefix \"\(localPrefix)\""
        case .unavailable(let endpoints, let reason):
            "no etcd member answered (\(endpoints.joined(separator: ", "))): \(reason)"
        case .etcd(let code, let message): "etcd refused the request: \(message) (gRPC code \(code))"
        case .outcomeUnknown(let reason):
            "the transaction was sent to etcd but its answer was lost (\(reason)); it may have been applied"
        case .tooManyConflicts(let attempts):
            "a key read by the update changed concurrently on each of \(attempts) attempts"
        case .tooManyOperations(let count, let limit):
            "a transaction of \(count) operations is more than etcd accepts (\(limit))"
        case .unparsableValue(let key, let revision):
            "the value etcd holds for key \"\(key)\" (put at revision \(revision)) does not parse or cannot be "
                + "stored, so the local copy keeps its last good value; a write that reads the key is refused "
                + "(nothing was sent): put a valid value in etcd, or set the key without reading it"
        case .notRunning: "the mirror is not running (start() it first; after stop() it cannot be used)"
        case .notAppliedLocally(let revision):
            "etcd applied the write at revision \(revision), but the mirror has not applied it locally yet"
        }
    }
}

/// etcd compacted the revision a request asked for; the caller re-reads at the newest one.
struct EtcdCompacted: Error {}
