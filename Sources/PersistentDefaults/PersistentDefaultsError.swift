/// Every error that PersistentDefaults throws or reports.
///
/// Match the case you care about and let the rest propagate:
///
/// ```swift
/// do {
///     try store.set(hugeName, for: key)
/// } catch PersistentDefaultsError.invalidKeyName(let name, let reason) {
///     print("bad key \(name): \(reason)")
/// }
/// ```
///
/// An error that carries an LMDB or `errno` code (``code``) also matches that code as a pattern,
/// whichever case holds it:
///
/// ```swift
/// do {
///     try store.set(frame, for: .frame)
/// } catch LMDBResultCode.mapFull {
///     // the disk or the address space is full
/// } catch LMDBResultCode(rawValue: ENOSPC) {
///     // no space left on the device
/// }
/// ```
public enum PersistentDefaultsError: Error, Sendable, Equatable, CustomStringConvertible {
    /// An LMDB call failed; `code` is the raw LMDB or `errno` code.
    case lmdb(code: LMDBResultCode, operation: String)
    /// A key name is empty or longer than LMDB allows (511 UTF-8 bytes).
    case invalidKeyName(String, reason: String)
    /// The stored bytes of `key` do not decode as the key's type.
    case decodingFailed(key: String, type: String, reason: String)
    /// A value of `key` could not be encoded.
    case encodingFailed(key: String, type: String, reason: String)
    /// The store was written in a newer on-disk format than this library reads.
    case unsupportedFormatVersion(found: UInt32, supported: UInt32)
    /// The path is not a PersistentDefaults store (missing, not a directory, or foreign data).
    case notAStore(path: String, reason: String)
    /// A file-system call failed with `errno`.
    case fileSystem(path: String, errno: Int32, operation: String)
    /// The store was opened read-only and a write was attempted.
    case readOnly(path: String)
    /// A write was started inside another write on the same thread, which would deadlock.
    case nestedWrite
    /// The store is open in this process with options that conflict with the requested ones.
    case optionsConflict(path: String, reason: String)
    /// A commit-log record is malformed.
    case corruptLogRecord(sequence: UInt64, reason: String)
    /// A value of `key` encodes to `size` bytes (type tag and payload), more than the store's
    /// ``PersistentDefaults/Options/maxValueSize`` (`limit`); nothing was written.
    case valueTooLarge(key: String, size: Int, limit: Int)
    /// A key cannot be declared as asked (`PersistentDefaults.declare`): `reason` says why.
    case invalidDeclaration(key: String, reason: String)
    /// An ``EtcdMirror`` owns `key` (its name starts with the mirror's `localPrefix`): only the
    /// mirror writes it, following etcd. Write it through the mirror (``EtcdMirror/set(_:for:)``)
    /// or in etcd (`etcdctl put <etcdPrefix><name>`); nothing was written.
    case ownedByMirror(key: String, localPrefix: String, etcdPrefix: String)
    /// Reported (not thrown) by an ``EtcdMirror`` whose consistency check found the local copy
    /// of `localPrefix` different from etcd at `revision` — a change the watch did not deliver —
    /// and made it equal, changing `keys` in one commit. Also when etcd's history went back (a
    /// member restarted without its data, or from an older backup, starts its revisions over):
    /// the local copy was made equal to etcd's state at its current `revision`, lower than the
    /// one recorded before, in one commit that changed `keys` (possibly none).
    case mirrorRepaired(localPrefix: String, revision: Int64, keys: [String])
    /// A ``Snapshot``, ``WriteTransaction`` or ``EtcdMirrorTransaction`` (`type`) was used after
    /// the closure it was passed to (`read { }`, `write { }`) returned; nothing was read or written.
    case usedAfterClosure(type: String)
    /// The store at `path` is closed: its last handle was released, or, with a `reason`, it was
    /// closed because a change of its memory map failed and left it unusable in this process.
    case storeClosed(path: String, reason: String?)
    /// An error from outside the library (thrown by user code or a system framework) that was
    /// reported through ``PersistentDefaults/Options/errorHandler``; `description` is its text.
    case unknown(description: String)

    /// The LMDB code, when the error came from LMDB or the file system.
    public var code: LMDBResultCode? {
        switch self {
        case .lmdb(let code, _): code
        case .fileSystem(_, let errno, _): LMDBResultCode(rawValue: errno)
        default: nil
        }
    }

    /// A one-line readable message.
    public var description: String {
        switch self {
        case .lmdb(let code, let operation):
            "\(operation) failed: \(code) (LMDB code \(code.rawValue))"
        case .invalidKeyName(let name, let reason):
            "invalid key name \"\(name.prefix(40))\(name.count > 40 ? "…" : "")\": \(reason)"
        case .decodingFailed(let key, let type, let reason):
            "value of key \"\(key)\" does not decode as \(type): \(reason)"
        case .encodingFailed(let key, let type, let reason):
            "value of key \"\(key)\" could not be encoded as \(type): \(reason)"
        case .unsupportedFormatVersion(let found, let supported):
            "store has on-disk format version \(found); this library reads up to version \(supported)"
        case .notAStore(let path, let reason):
            "\(path) is not a PersistentDefaults store: \(reason)"
        case .fileSystem(let path, let errno, let operation):
            "\(operation) \(path) failed: \(LMDBResultCode(rawValue: errno)) (errno \(errno))"
        case .readOnly(let path):
            "store \(path) is open read-only; writes are refused"
        case .nestedWrite:
            "a write was started inside another write on the same thread; do it inside the outer transaction"
        case .optionsConflict(let path, let reason):
            "store \(path) is already open in this process with other options: \(reason)"
        case .corruptLogRecord(let sequence, let reason):
            "commit log record \(sequence) is malformed: \(reason)"
        case .valueTooLarge(let key, let size, let limit):
            "value of key \"\(key)\" is \(size) bytes, over the limit of \(limit) bytes (Options.maxValueSize); "
                + "nothing was written"
        case .invalidDeclaration(let key, let reason):
            "key \"\(key)\" cannot be declared: \(reason)"
        case .ownedByMirror(let key, let localPrefix, let etcdPrefix):
            "key \"\(key)\" is mirrored from etcd (local prefix \"\(localPrefix)\" follows etcd prefix "
                + "\"\(etcdPrefix)\"); write it through the EtcdMirror or in etcd; nothing was written"
        case .mirrorRepaired(let localPrefix, let revision, let keys):
            "the mirror of \"\(localPrefix)\" differed from etcd at revision \(revision) and was repaired: "
                + (keys.isEmpty ? "no key changed" : keys.prefix(10).joined(separator: ", "))
                + (keys.count > 10 ? " … (\(keys.count) keys)" : "")
        case .usedAfterClosure(let type):
            "a \(type) was used after the closure it was passed to returned; nothing was read or written"
        case .storeClosed(let path, let reason):
            if let reason {
                "store \(path) is unusable in this process since a failed map change: \(reason)"
            } else {
                "store \(path) is closed"
            }
        case .unknown(let description):
            description
        }
    }
}

extension LMDBResultCode {
    /// Whether `error` is a ``PersistentDefaultsError`` whose ``PersistentDefaultsError/code`` is
    /// `pattern`, so that a result code can be caught or switched on:
    ///
    /// ```swift
    /// do {
    ///     try store.set(frame, for: .frame)
    /// } catch LMDBResultCode.mapFull {
    ///     // …
    /// }
    /// ```
    public static func ~= (pattern: LMDBResultCode, error: any Error) -> Bool {
        (error as? PersistentDefaultsError)?.code == pattern
    }

    /// Whether `error`'s ``PersistentDefaultsError/code`` is `pattern`, for `catch` clauses of
    /// functions that throw only ``PersistentDefaultsError`` (typed throws).
    public static func ~= (pattern: LMDBResultCode, error: PersistentDefaultsError) -> Bool {
        error.code == pattern
    }
}
