/// One atomic write transaction, passed to ``PersistentDefaults/write(_:)``.
///
/// ```swift
/// try store.write { tx in
///     tx[.launchCount] += 1               // reads see the transaction's own writes
///     tx[.frame] = WindowFrame(x: 1, y: 2, title: "Main")
/// }
/// ```
///
/// Valid only inside the closure it was passed to: later uses throw or read defaults. A write
/// through the non-throwing subscript that fails makes the whole transaction throw and write
/// nothing.
public final class WriteTransaction {
    // Strong: a kept reference must throw, not trap, after the store is released.
    let core: StoreCore
    private let transaction: Transaction
    private var isValid = true
    private var firstError: (any Error)?
    /// For each key touched, by the name's UTF-8 bytes (a key name is its bytes: names that
    /// `String` equality calls equal, such as NFC and NFD forms, are different keys): the name
    /// and the value's bytes before the transaction and now.
    private var touched: [[UInt8]: (name: String, old: [UInt8]?, new: [UInt8]?)] = [:]
    /// The touched names' bytes, in the order first touched.
    private var order: [[UInt8]] = []
    /// Log a record even when no value changed: the transaction changed what the log must
    /// account for, such as key declarations in `meta`.
    var logsWithoutValueChanges = false
    /// Set by an ``EtcdMirror`` applying etcd's changes: only such a transaction may write the
    /// keys a mirror owns.
    var appliesMirror = false
    /// The prefixes that mirrors own, read from `meta` at the first write of a value.
    var mirrorOwners: [(localPrefix: [UInt8], record: [UInt8])]?

    init(core: StoreCore, transaction: Transaction) {
        self.core = core
        self.transaction = transaction
    }

    func invalidate() { isValid = false }

    func live() throws -> Transaction {
        guard isValid else {
            throw PersistentDefaultsError.usedAfterClosure(type: "WriteTransaction")
        }
        return transaction
    }

    /// Logs the changes; nil when nothing changed. Throws the first failed subscript write.
    func finish() throws -> CommitRecord? {
        if let firstError { throw firstError }
        let changes = order.compactMap { nameBytes -> CommitRecord.Change? in
            guard let entry = touched[nameBytes], entry.old != entry.new else { return nil }
            return CommitRecord.Change(key: entry.name, encodedValue: entry.new)
        }
        guard !changes.isEmpty || logsWithoutValueChanges else { return nil }
        return try core.appendLog(changes, in: transaction)
    }

    // MARK: Reading

    /// The key's value as this transaction sees it; throws when it does not decode.
    public func value<Value>(for key: PersistentDefaults.Key<Value>) throws -> Value {
        try core.value(key, in: try live())
    }

    /// The key type's value as this transaction sees it.
    public func value<K: PersistentDefaultsKey>(for key: K) throws -> K.Value where K.Conversion.Stored: Codable {
        try value(for: K.key)
    }

    /// Whether a value is stored for the key.
    public func contains(_ key: PersistentDefaults.Keys) throws -> Bool {
        try key.validate()
        return try core.encodedValue(named: key.nameBytes, in: try live()) != nil
    }

    /// The stored value of the key named `name`, untyped.
    public func storedValue(named name: String) throws -> StoredValue? {
        try core.storedValue(named: name, in: try live())
    }

    /// The names of all stored keys, sorted by their UTF-8 bytes.
    public func keyNames() throws -> [String] { try core.keyNames(in: try live()) }

    // MARK: Writing

    /// Reads and writes a key; a value that does not decode reads as the default (reported).
    public subscript<Value>(key: PersistentDefaults.Key<Value>) -> Value {
        get {
            guard isValid else { return key.defaultValue }
            return core.valueOrDefault(key, in: transaction)
        }
        set { recordingFailure { try set(newValue, for: key) } }
    }

    /// Reads and writes a key type's value.
    public subscript<K: PersistentDefaultsKey>(key: K) -> K.Value where K.Conversion.Stored: Codable {
        get { self[K.key] }
        set { self[K.key] = newValue }
    }

    /// Stores `value` for `key`, applying the key's hooks.
    public func set<Value>(_ value: Value, for key: PersistentDefaults.Key<Value>) throws {
        try key.validate()
        try set(value, encoded: try core.encode(value, for: key), for: key)
    }

    /// Stores `value`, already encoded, applying the key's hooks.
    func set<Value>(_ value: Value, encoded: [UInt8], for key: PersistentDefaults.Key<Value>) throws {
        let transaction = try live()
        if key.shouldRemove?(value) == true || (key.removesNil && encoded == [StoredValue.Tag.null.rawValue]) {
            return try replace(key, with: nil, in: transaction)
        }
        if let shouldOverwrite = key.shouldOverwrite, let old = try oldValue(of: key, in: transaction),
            !shouldOverwrite(old, value)
        {
            return
        }
        try replace(key, with: try storedForm(of: value, encoded: encoded, for: key, in: transaction), in: transaction)
    }

    /// The bytes to store for `value`: those the key holds now, or held before the transaction,
    /// when they decode to a value equal (`==`) to `value`; else `encoded`.
    ///
    /// Equal values can encode to different bytes — the JSON of a `Set`, or of a dictionary
    /// whose keys are not strings, has no fixed order; a date stored with the old tag 0x07 — and
    /// keeping the held bytes makes setting such a value no change: nothing is written or logged
    /// and no observer is called, also when a transaction changes the key and then sets it back.
    private func storedForm<Value>(
        of value: Value, encoded: [UInt8], for key: PersistentDefaults.Key<Value>, in transaction: Transaction
    ) throws -> [UInt8] {
        guard let isEqual = key.isEqual else { return encoded }
        let entry = try bytes(of: key, in: transaction)
        for held in entry.old == entry.new ? [entry.new] : [entry.new, entry.old] {
            guard let held else { continue }
            if held == encoded { return encoded }
            // Only JSON and the old date form can encode an equal value differently; every other
            // tag's bytes are canonical, so comparing bytes is enough (and saves a decode).
            guard Self.mayEncodeEqualValuesDifferently(held) || Self.mayEncodeEqualValuesDifferently(encoded) else {
                continue
            }
            // Held bytes that no longer decode are replaced, not compared.
            if let heldValue = try? key.codec.decode(held), isEqual(heldValue, value) { return held }
        }
        return encoded
    }

    /// Stores a key type's value, applying its hooks.
    public func set<K: PersistentDefaultsKey>(_ value: K.Value, for key: K) throws where K.Conversion.Stored: Codable {
        try set(value, for: K.key)
    }

    /// Removes the key; reads give its default again.
    public func remove(_ key: PersistentDefaults.Keys) throws {
        try key.validate()
        try replace(key, with: nil, in: try live())
    }

    /// Removes a key type's value.
    public func remove<K: PersistentDefaultsKey>(_ key: K) throws where K.Conversion.Stored: Codable {
        try remove(K.key)
    }

    /// Removes every stored key.
    public func removeAll() throws {
        let transaction = try live()
        for name in try core.keyNames(in: transaction) {
            try replace(PersistentDefaults.Keys(name: name), with: nil, in: transaction)
        }
    }

    /// Stores an untyped value under `name`, as `pdinspect set` does.
    public func setStoredValue(_ value: StoredValue, named name: String) throws {
        let key = PersistentDefaults.Keys(name: name)
        try key.validate()
        try replace(key, with: value.encodedValue, in: try live())
    }

    /// The stored value of a key with a hook, decoded; nil when absent or undecodable.
    private func oldValue<Value>(of key: PersistentDefaults.Key<Value>, in transaction: Transaction) throws -> Value? {
        guard let bytes = try core.encodedValue(named: key.nameBytes, in: transaction) else { return nil }
        // A stored value that no longer decodes is replaced, not compared.
        return try? key.codec.decode(bytes)
    }

    /// Whether an encoded value's tag is one whose equal values may have different bytes.
    private static func mayEncodeEqualValuesDifferently(_ bytes: [UInt8]) -> Bool {
        bytes.first == StoredValue.Tag.json.rawValue || bytes.first == StoredValue.legacyDateTag
    }

    /// The key's stored bytes before the transaction and as the transaction holds them now.
    private func bytes(
        of key: PersistentDefaults.Keys, in transaction: Transaction
    ) throws -> (old: [UInt8]?, new: [UInt8]?) {
        if let entry = touched[key.nameBytes] { return (entry.old, entry.new) }
        let current = try core.encodedValue(named: key.nameBytes, in: transaction)
        touched[key.nameBytes] = (key.name, current, current)
        order.append(key.nameBytes)
        return (current, current)
    }

    /// Writes `bytes` (nil removes) unless they equal what the transaction already holds; every
    /// write of a value goes through here, so the size limit is checked here.
    func replace(_ key: PersistentDefaults.Keys, with bytes: [UInt8]?, in transaction: Transaction) throws {
        if let bytes { try core.checkSize(bytes, of: key.name) }
        try checkNotMirrored(key, in: transaction)
        guard bytes != (try self.bytes(of: key, in: transaction)).new else { return }
        try key.nameBytes.withUnsafeBytes { name in
            if let bytes {
                try bytes.withUnsafeBytes { try transaction.put(core.databases.values, name, $0) }
            } else {
                try transaction.delete(core.databases.values, name)
            }
        }
        touched[key.nameBytes]?.new = bytes
    }

    private func recordingFailure(_ body: () throws -> Void) {
        do { try body() } catch { if firstError == nil { firstError = error } }
    }
}

/// A consistent, read-only view of the store, passed to ``PersistentDefaults/read(_:)``.
///
/// ```swift
/// let (count, frame) = try store.read { snapshot in (snapshot[.launchCount], snapshot[.frame]) }
/// ```
///
/// Every read in one snapshot sees the same committed state. Valid only inside the closure.
public final class Snapshot {
    // Strong: a kept reference must throw, not trap, after the store is released.
    let core: StoreCore
    private let transaction: Transaction
    private var isValid = true

    init(core: StoreCore, transaction: Transaction) {
        self.core = core
        self.transaction = transaction
    }

    func invalidate() { isValid = false }

    func live() throws -> Transaction {
        guard isValid else {
            throw PersistentDefaultsError.usedAfterClosure(type: "Snapshot")
        }
        return transaction
    }

    /// The key's value; a value that does not decode reads as the default (reported once).
    public subscript<Value>(key: PersistentDefaults.Key<Value>) -> Value {
        guard isValid else { return key.defaultValue }
        return core.valueOrDefault(key, in: transaction)
    }

    /// A key type's value.
    public subscript<K: PersistentDefaultsKey>(key: K) -> K.Value where K.Conversion.Stored: Codable { self[K.key] }

    /// The key's value; throws when it does not decode.
    public func value<Value>(for key: PersistentDefaults.Key<Value>) throws -> Value {
        try core.value(key, in: try live())
    }

    /// Whether a value is stored for the key.
    public func contains(_ key: PersistentDefaults.Keys) throws -> Bool {
        try key.validate()
        return try core.encodedValue(named: key.nameBytes, in: try live()) != nil
    }

    /// The stored value of the key named `name`, untyped.
    public func storedValue(named name: String) throws -> StoredValue? {
        try core.storedValue(named: name, in: try live())
    }

    /// The names of all stored keys, sorted by their UTF-8 bytes.
    public func keyNames() throws -> [String] { try core.keyNames(in: try live()) }

    /// The commit-log records after `sequence`, oldest first.
    public func commits(after sequence: UInt64, limit: Int = .max) throws -> [CommitRecord] {
        try core.commits(after: sequence, limit: limit, in: try live())
    }
}
