import Foundation

/// A UserDefaults-style store of typed settings, kept in LMDB.
///
/// ```swift
/// extension PersistentDefaults.Keys {
///     static let launchCount = Key<Int>("launchCount", default: 0)
/// }
///
/// let store = try PersistentDefaults(path: "/var/lib/myservice/settings")
/// store[.launchCount] += 1                      // durable when it returns (`.sync`)
/// try store.write { tx in tx[.launchCount] = 10 } // atomic, several keys at once
/// ```
///
/// A store is `Sendable` and safe to use from any thread or task. Opening the same store again
/// in one process, by any path to its directory, shares one LMDB environment; several processes
/// may open it at once.
public final class PersistentDefaults: Sendable {
    @usableFromInline let core: StoreCore
    /// Whether this handle was opened read-only; the store it shares may be writable (another
    /// handle in this process opened it so), so every write path checks this, not the store's options.
    let isReadOnly: Bool
    /// The canonical path this handle was opened through (see ``path``).
    private let openedPath: String

    /// Opens the store in the directory `path`, creating the directory (mode 0700) and the store
    /// when they are missing, unless `options.readOnly` is set.
    ///
    /// Throws ``PersistentDefaultsError/notAStore(path:reason:)`` for a path that is no store,
    /// ``PersistentDefaultsError/unsupportedFormatVersion(found:supported:)`` for a store written
    /// by a newer version, and ``PersistentDefaultsError/optionsConflict(path:reason:)`` when the
    /// store is already open in this process with another durability or as read-only.
    public convenience init(path: String, options: Options = Options()) throws {
        try self.init(path: path, options: options, temporary: false)
    }

    /// Opens the store; a `temporary` one's directory is removed when its last handle goes.
    init(path: String, options: Options, temporary: Bool) throws {
        (core, openedPath) = try StoreRegistry.acquire(path: path, options: options, temporary: temporary)
        isReadOnly = options.readOnly
    }

    /// Opens the store in the directory at `url`; see ``init(path:options:)``.
    public convenience init(url: URL, options: Options = Options()) throws {
        try self.init(path: url.path, options: options)
    }

    deinit { StoreRegistry.release(core) }

    /// The store's directory, as an absolute path: the canonical form (symbolic links resolved)
    /// of the path this handle was opened with.
    ///
    /// Handles of one store may give different paths: a store whose directory was renamed while
    /// it was open is the same store at its new path, and a handle opened through that path gives
    /// it, while older handles give the path they were opened with.
    public var path: String { openedPath }

    /// The options the store was first opened with in this process.
    public var options: Options { core.options }

    // MARK: Reading

    /// The key's value, or its default when nothing is stored.
    ///
    /// Throws ``PersistentDefaultsError/decodingFailed(key:type:reason:)`` when the stored value
    /// does not decode as `Value`, and LMDB errors when the store cannot be read.
    ///
    /// `@inlinable`, like the subscript and ``PersistentDefault/wrappedValue``: the caller's
    /// module specialises the decoding for `Value`, and the library's part of the read
    /// (`StoreCore.readValue`) is not generic, so a get from another module runs no unspecialised
    /// generic code (measured: each generic layer cost about 25 ns per read).
    @inlinable
    public func value<Value>(for key: Key<Value>) throws -> Value {
        var value: Value?
        guard key.decodesInsideRead else {
            // The type's decoding is the user's code, which may read or write the store (even
            // grow its map): it runs on a copy, after the read, holding nothing of the store.
            // The bytes this process last stored or read are not decoded again (see `lastKnown`).
            var copy: [UInt8]?
            try core.readValue(of: key) { bytes in
                guard let bytes else { return }
                value = key.knownValue(of: bytes)
                if value == nil { copy = Array(bytes) }
            }
            if let value { return value }
            guard let copy else { return key.defaultValue }
            return try key.decodeRemembering(copy)
        }
        try core.readValue(of: key) { bytes in
            if let bytes { value = try key.decode(bytes) } else { value = key.defaultValue }
        }
        // `readValue` calls its body exactly once unless it throws.
        guard let value else { throw PersistentDefaultsError.lmdb(code: .invalid, operation: "read \(key.name)") }
        return value
    }

    /// A key type's value; see ``value(for:)-(Key<Value>)``.
    public func value<K: PersistentDefaultsKey>(for key: K) throws -> K.Value where K.Conversion.Stored: Codable {
        try value(for: K.key)
    }

    /// Reads and writes a key without throwing.
    ///
    /// A read that fails returns the default and reports the error once (see
    /// ``Options/errorHandler``); a write that fails is reported and leaves the old value.
    @inlinable
    public subscript<Value>(key: Key<Value>) -> Value {
        get {
            do {
                return try value(for: key)
            } catch {
                reportReadFailure(error)
                return key.defaultValue
            }
        }
        set {
            do { try set(newValue, for: key) } catch { reportWriteFailure(error) }
        }
    }

    /// Reports a failed read once (see ``Options/errorHandler``).
    @usableFromInline
    func reportReadFailure(_ error: any Error) { core.reporter.reportOnce(error) }

    /// Reports a failed write (see ``Options/errorHandler``).
    @usableFromInline
    func reportWriteFailure(_ error: any Error) { core.reporter.report(error) }

    /// Reads and writes a key type's value without throwing; see ``subscript(_:)-(Key<Value>)``.
    public subscript<K: PersistentDefaultsKey>(key: K) -> K.Value where K.Conversion.Stored: Codable {
        get { self[K.key] }
        set { self[K.key] = newValue }
    }

    /// Whether a value is stored for the key (a key at its default may not be stored).
    public func contains(_ key: Keys) throws -> Bool {
        try read { try $0.contains(key) }
    }

    /// Whether a value is stored for the key type.
    public func contains<K: PersistentDefaultsKey>(_ key: K) throws -> Bool where K.Conversion.Stored: Codable {
        try contains(K.key)
    }

    /// The names of all stored keys, sorted by their UTF-8 bytes.
    public func keyNames() throws -> [String] { try read { try $0.keyNames() } }

    /// The stored value of the key named `name`, untyped: what `pdinspect get` prints.
    public func storedValue(named name: String) throws -> StoredValue? {
        try read { try $0.storedValue(named: name) }
    }

    /// Runs `body` with a consistent snapshot: every read in it sees the same commit.
    ///
    /// ```swift
    /// let (count, frame) = try store.read { ($0[.launchCount], $0[.frame]) }
    /// ```
    ///
    /// Do not wait in `body` for another thread that reads this store: if another process grew
    /// the map meanwhile, that thread waits for `body` to end. Reads in `body` that do not go
    /// through the snapshot then see the snapshot's commit (<doc:TransactionsAndSnapshots>).
    public func read<R>(_ body: (Snapshot) throws -> R) throws -> R {
        // Errors reported inside the scope reach the handler now that it has ended (see
        // `ErrorReporter`).
        defer { core.reporter.deliverDeferred() }
        return try core.environment.withRead(runsUserCode: true) { transaction in
            let snapshot = Snapshot(core: core, transaction: transaction)
            defer { snapshot.invalidate() }
            return try body(snapshot)
        }
    }

    /// The commit-log records after `sequence`, oldest first, at most `limit`.
    ///
    /// Persist the last sequence you handled and pass it after a restart to catch up. Records
    /// past the retention (``Options/logRetention``, ``Options/logRetentionBytes``) are gone; compare
    /// ``lastSequence()`` and the first record's sequence to tell.
    public func commits(after sequence: UInt64, limit: Int = .max) throws -> [CommitRecord] {
        try read { try $0.commits(after: sequence, limit: limit) }
    }

    /// The sequence number of the newest commit, 0 for a store never written.
    ///
    /// Throws ``PersistentDefaultsError/corruptLogRecord(sequence:reason:)`` when the newest log
    /// key is not a sequence number (written by another tool); writes then throw it too.
    public func lastSequence() throws -> UInt64 {
        try core.environment.withRead { try core.lastSequence(in: $0) }
    }

    // MARK: Writing

    /// Stores `value` for `key` in its own transaction; durable on return in `.sync` mode.
    public func set<Value>(_ value: Value, for key: Key<Value>) throws {
        try key.validate()
        let fresh = try core.encode(value, for: key)
        // Before joining a group commit: a value over the limit must fail this call only.
        try core.checkSize(fresh, of: key.name)
        if key.shouldRemove != nil || key.shouldOverwrite != nil {
            return try setAskingHooks(value, encoded: fresh, for: key)
        }
        // A type whose decoding is the user's code is compared with the stored value here, not in
        // the transaction, where its `init(from:)` would run under LMDB's writer lock (and, in a
        // group commit, for other threads' writes too) and could not write the store.
        let decodesInTransaction = key.decodesInsideRead
        let encoded =
            decodesInTransaction ? fresh : try equalStoredForm(of: value, encoded: fresh, for: key) ?? fresh
        if joinsGroupCommit {
            try writeOne(sizeHint: encoded.count) {
                try $0.set(value, encoded: encoded, for: key, decodingHeld: decodesInTransaction)
            }
        } else {
            // Not through `writeOne`: its escaping closure would cost an allocation per set.
            try write(sizeHint: encoded.count) {
                try $0.set(value, encoded: encoded, for: key, decodingHeld: decodesInTransaction)
            }
        }
        // The store holds `encoded` now (or holds it no longer, which `equalStoredForm` notices by
        // the bytes): when those are `value`'s own bytes, the next set need not decode them.
        if !decodesInTransaction, encoded == fresh { key.remember(fresh, encoding: value) }
    }

    /// `set` of a key type's value. Its hooks are the user's code, and `shouldOverwrite` compares
    /// with the stored value, which the user's code decodes: all of it runs here, on the
    /// caller's thread with nothing of the store held, not in the write transaction (under
    /// LMDB's writer lock, in a group commit for other threads' sets too, where a decoder's own
    /// write threw `nestedWrite`). The transaction then writes only while the key still holds
    /// the bytes the hook was asked about; when a commit changed them meanwhile, it writes
    /// nothing and the hook is asked again about the new bytes.
    private func setAskingHooks<Value>(_ value: Value, encoded fresh: [UInt8], for key: Key<Value>) throws {
        if key.shouldRemove?(value) == true || (key.removesNil && fresh == [StoredValue.Tag.null.rawValue]) {
            return try writeOne(sizeHint: 0) { try $0.remove(key) }
        }
        let applied = Locked(false)
        var encoded = fresh
        repeat {
            var stored: [UInt8]?
            var held: Value?
            try core.readValue(of: key) { bytes in
                guard let bytes else { return }
                held = key.knownValue(of: bytes)
                stored = Array(bytes)
            }
            // Nothing stored, or bytes that do not decode: written without asking (as before).
            if let shouldOverwrite = key.shouldOverwrite, let stored {
                held = held ?? (try? key.decodeRemembering(stored))
                if let held, !shouldOverwrite(held, value) { return }
            }
            // The equal stored form from the same read (the transaction writes only while the key
            // holds these bytes), not from another one.
            encoded = fresh
            if !key.decodesInsideRead, let stored, stored.withUnsafeBytes({ Self.mayDecodeEqual($0, fresh) }),
                let equal = equalForm(of: value, for: key, stored: stored, known: held)
            {
                encoded = equal
            }
            try writeOne(sizeHint: encoded.count) { [encoded, expected = stored] transaction in
                let wrote = try transaction.replace(key, with: encoded, ifHolding: expected)
                applied.withLock { $0 = wrote }
            }
        } while !applied.withLock({ $0 })
        if !key.decodesInsideRead, encoded == fresh { key.remember(fresh, encoding: value) }
    }

    /// The stored bytes of `key` when they differ from `encoded` but decode to a value equal to
    /// `value` (JSON without a fixed order, the old date form; see `WriteTransaction.storedForm`),
    /// decoded after the read has ended; else nil. Keeping them makes the set no change. A commit
    /// between this read and the write can only make an equal value's set a change.
    private func equalStoredForm<Value>(of value: Value, encoded: [UInt8], for key: Key<Value>) throws -> [UInt8]? {
        guard key.isEqual != nil else { return nil }
        var stored: [UInt8]?
        var held: Value?
        try core.readValue(of: key) { bytes in
            // Copied only when they may decode equal: the same bytes, or a tag whose equal values
            // have one encoding each, need no decoding (and a set of them no allocation).
            guard let bytes, Self.mayDecodeEqual(bytes, encoded) else { return }
            held = key.knownValue(of: bytes)
            stored = Array(bytes)
        }
        guard let stored else { return nil }
        return equalForm(of: value, for: key, stored: stored, known: held)
    }

    /// `stored`, bytes read for `key` that ``mayDecodeEqual(_:_:)`` admits, when they encode a
    /// value equal to `value`: `known` when this process knows it already, else they are decoded
    /// (after the read has ended); else nil.
    @inline(__always)  // An `Optional<Value>` argument to a call costs a generic metadata lookup.
    private func equalForm<Value>(of value: Value, for key: Key<Value>, stored: [UInt8], known: Value?) -> [UInt8]? {
        guard let isEqual = key.isEqual, let held = known ?? (try? key.decodeRemembering(stored)), isEqual(held, value)
        else { return nil }
        return stored
    }

    /// Whether stored `bytes` may encode a value equal to the one `encoded` encodes, in other
    /// bytes: they differ, and one of the two has a tag whose equal values may have different bytes.
    @inline(__always)
    private static func mayDecodeEqual(_ bytes: UnsafeRawBufferPointer, _ encoded: [UInt8]) -> Bool {
        !encoded.withUnsafeBytes({ bytes.elementsEqual($0) })
            && (WriteTransaction.mayEncodeEqualValuesDifferently(bytes.first)
                || WriteTransaction.mayEncodeEqualValuesDifferently(encoded.first))
    }

    /// Stores a key type's value, applying its `shouldRemove` and `shouldOverwrite` hooks.
    public func set<K: PersistentDefaultsKey>(_ value: K.Value, for key: K) throws where K.Conversion.Stored: Codable {
        try set(value, for: K.key)
    }

    /// Removes the key; reads give its default again.
    public func remove(_ key: Keys) throws {
        // Before joining a group commit: a bad name must fail this call only.
        try key.validate()
        try writeOne(sizeHint: 0) { try $0.remove(key) }
    }

    /// Removes a key type's value.
    public func remove<K: PersistentDefaultsKey>(_ key: K) throws where K.Conversion.Stored: Codable {
        try remove(K.key)
    }

    /// Removes every stored key in one transaction.
    public func removeAll() throws {
        try write { try $0.removeAll() }
    }

    /// Runs `body` in one atomic LMDB write transaction and commits it when `body` returns.
    ///
    /// ```swift
    /// try store.write { tx in
    ///     tx[.launchCount] += 1
    ///     tx[.frame] = WindowFrame(x: 1, y: 2, title: "Main")
    /// }
    /// ```
    ///
    /// If `body` throws, nothing is written and the error is rethrown. Write transactions are
    /// serialised across threads and processes, so a read-modify-write in `body` never loses an
    /// update. `body` must not start another write on the same thread
    /// (``PersistentDefaultsError/nestedWrite``) and should have no effects outside the
    /// transaction: if the store must grow its map, `body` runs again.
    public func write<R>(_ body: (WriteTransaction) throws -> R) throws -> R {
        try write(sizeHint: 0, body)
    }

    /// Writes one key. In `.sync` mode, writes of several threads that wait at once share one
    /// durable commit (see `GroupCommit`); each still returns only once its write is durable.
    private func writeOne(sizeHint: Int, _ operation: @escaping @Sendable (WriteTransaction) throws -> Void) throws {
        guard joinsGroupCommit else { return try write(sizeHint: sizeHint) { try operation($0) } }
        if isReadOnly { throw PersistentDefaultsError.readOnly(path: path) }
        try core.groupCommit.perform(core: core, sizeHint: sizeHint, operation)
    }

    /// Whether a single-key write of this thread joins a group commit: in `.sync` mode, unless
    /// the thread is inside a read or write scope of its own, where it must not wait for a
    /// leader (the leader may need the gate exclusively to grow the map).
    private var joinsGroupCommit: Bool {
        core.options.durability == .sync && !core.environment.gate.isHeldByCurrentThread
    }

    private func write<R>(sizeHint: Int, _ body: (WriteTransaction) throws -> R) throws -> R {
        if isReadOnly { throw PersistentDefaultsError.readOnly(path: path) }
        return try core.write(sizeHint: sizeHint, body)
    }

    /// Flushes commits to disk now; in `.sync` mode they already are. A read-only store has none
    /// of its own: this returns at once.
    public func flush() throws { try core.environment.sync() }
}

extension StoreCore {
    /// The newest log sequence number in `transaction`, 0 when the log is empty. Throws
    /// ``PersistentDefaultsError/corruptLogRecord(sequence:reason:)`` when the last log key is
    /// not a sequence number (another tool wrote it).
    func lastSequence(in transaction: Transaction) throws -> UInt64 {
        var last: UInt64 = 0
        try transaction.forEach(databases.log, reverse: true) { key, _ in
            last = try logSequence(fromKey: key)
            return false
        }
        return last
    }
}
