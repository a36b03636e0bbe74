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
public final class WriteTransaction: StoreView {
    private var firstError: (any Error)?
    /// Each key touched, in the order first touched: the name's UTF-8 bytes (a key name is its
    /// bytes: names that `String` equality calls equal, such as NFC and NFD forms, are different
    /// keys), the name, and the value's bytes before the transaction and now.
    private var touched = TouchedKeys()
    /// The index in `touched` of each name's bytes, kept once more than `linearSearchLimit` keys
    /// are touched; a transaction of a few keys finds them by comparing bytes, without hashing.
    private var touchedIndex: [NameBytes: Int] = [:]
    /// Log a record even when no value changed: the transaction changed what the log must
    /// account for, such as key declarations in `meta`.
    var logsWithoutValueChanges = false
    /// Set by an ``EtcdMirror`` applying etcd's changes: only such a transaction may write the
    /// keys a mirror owns.
    var appliesMirror = false
    /// The prefixes that mirrors own, read from `meta` at the first write of a value, or taken
    /// from the previous commit's `CommitCache`.
    var mirrorOwners: [(localPrefix: [UInt8], record: [UInt8])]?
    /// The newest log sequence, from the previous commit's `CommitCache`; nil: read the log.
    private let cachedLastSequence: UInt64?

    private struct TouchedKey {
        let nameBytes: [UInt8]
        let name: String
        let old: [UInt8]?
        var new: [UInt8]?
    }

    /// The keys a transaction touched; the first is held inline, so that a single-key `set`
    /// allocates no array for it.
    private struct TouchedKeys {
        private var first: TouchedKey?
        private var rest: [TouchedKey] = []

        var count: Int { first == nil ? 0 : 1 + rest.count }

        // Field by field, not the whole entry: copying an entry out retains its four references.

        func nameBytes(at position: Int) -> [UInt8] { position == 0 ? first!.nameBytes : rest[position - 1].nameBytes }

        func old(at position: Int) -> [UInt8]? { position == 0 ? first!.old : rest[position - 1].old }

        func new(at position: Int) -> [UInt8]? { position == 0 ? first!.new : rest[position - 1].new }

        /// The change of the key at `position`; nil when its value is what it was before.
        func change(at position: Int) -> CommitRecord.Change? {
            if position == 0 {
                guard let first, first.old != first.new else { return nil }
                return CommitRecord.Change(key: first.name, encodedValue: first.new)
            }
            guard rest[position - 1].old != rest[position - 1].new else { return nil }
            return CommitRecord.Change(key: rest[position - 1].name, encodedValue: rest[position - 1].new)
        }

        mutating func setNew(_ bytes: [UInt8]?, at position: Int) {
            if position == 0 { first!.new = bytes } else { rest[position - 1].new = bytes }
        }

        mutating func append(_ key: TouchedKey) {
            if first == nil { first = key } else { rest.append(key) }
        }

        /// The position of the key whose name is `nameBytes`, by comparing bytes.
        func position(of nameBytes: [UInt8]) -> Int? {
            guard let first else { return nil }
            // `==` on arrays first compares their buffers: the same key object's bytes match at once.
            if first.nameBytes == nameBytes { return 0 }
            return rest.firstIndex { $0.nameBytes == nameBytes }.map { $0 + 1 }
        }
    }

    private static let linearSearchLimit = 8

    /// A key name's bytes as a dictionary key, hashed as one buffer: `[UInt8]`'s own hashing
    /// feeds the hasher byte by byte.
    private struct NameBytes: Hashable {
        let bytes: [UInt8]

        func hash(into hasher: inout Hasher) { bytes.withUnsafeBytes { hasher.combine(bytes: $0) } }
    }

    init(core: StoreCore, transaction: Transaction, cache: CommitCache? = nil) {
        cachedLastSequence = cache?.lastSequence
        mirrorOwners = cache?.mirrorOwners
        super.init(core: core, transaction: transaction, typeName: "WriteTransaction")
    }

    /// Logs the changes; nil when nothing changed. Throws the first failed subscript write.
    func finish() throws -> CommitRecord? {
        if let firstError { throw firstError }
        var changes: [CommitRecord.Change] = []
        changes.reserveCapacity(touched.count)
        for position in 0..<touched.count {
            if let change = touched.change(at: position) { changes.append(change) }
        }
        guard !changes.isEmpty || logsWithoutValueChanges else { return nil }
        return try core.appendLog(changes, cachedLastSequence: cachedLastSequence, in: transaction)
    }

    // MARK: Writing

    /// Reads and writes a key; a value that does not decode reads as the default (reported).
    public subscript<Value>(key: PersistentDefaults.Key<Value>) -> Value {
        get { valueOrDefault(key) }
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
        // Found once for both steps: a transaction of many keys hashes each name once.
        let position = key.isEqual == nil ? nil : try touchedPosition(of: key, in: transaction)
        try replace(
            key, with: storedForm(of: value, encoded: encoded, for: key, at: position), in: transaction,
            at: position)
    }

    /// The bytes to store for `value`: those the key holds now, or held before the transaction,
    /// when they decode to a value equal (`==`) to `value`; else `encoded`.
    ///
    /// Equal values can encode to different bytes — the JSON of a `Set`, or of a dictionary
    /// whose keys are not strings, has no fixed order; a date stored with the old tag 0x07 — and
    /// keeping the held bytes makes setting such a value no change: nothing is written or logged
    /// and no observer is called, also when a transaction changes the key and then sets it back.
    /// `position` is the key's place in `touched`, nil when the key has no `isEqual`.
    private func storedForm<Value>(
        of value: Value, encoded: [UInt8], for key: PersistentDefaults.Key<Value>, at position: Int?
    ) -> [UInt8] {
        guard let isEqual = key.isEqual, let position else { return encoded }
        func isEqualForm(_ held: [UInt8]?) -> Bool {
            guard let held else { return false }
            if held == encoded { return true }
            // Only JSON and the old date form can encode an equal value differently; every other
            // tag's bytes are canonical, so comparing bytes is enough (and saves a decode).
            guard Self.mayEncodeEqualValuesDifferently(held) || Self.mayEncodeEqualValuesDifferently(encoded) else {
                return false
            }
            // Held bytes that no longer decode are replaced, not compared.
            guard let heldValue = try? key.codec.decode(held) else { return false }
            return isEqual(heldValue, value)
        }
        let new = touched.new(at: position)
        if isEqualForm(new), let new { return new }
        let old = touched.old(at: position)
        if old != new, isEqualForm(old), let old { return old }
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

    /// The key's position in `touched`; a key not yet touched is added with the bytes it holds.
    private func touchedPosition(of key: PersistentDefaults.Keys, in transaction: Transaction) throws -> Int {
        let nameBytes = key.nameBytes
        let next = touched.count
        if next <= Self.linearSearchLimit {
            if let position = touched.position(of: nameBytes) { return position }
        } else {
            if touchedIndex.isEmpty {
                touchedIndex.reserveCapacity(4 * next)
                for position in 0..<next { touchedIndex[NameBytes(bytes: touched.nameBytes(at: position))] = position }
            }
            // One hash: the default is inserted when the name is new.
            let position = Self.valueOrInsert(&touchedIndex[NameBytes(bytes: nameBytes), default: next])
            if position != next { return position }
        }
        let current: [UInt8]?
        do {
            current = try core.encodedValue(named: nameBytes, in: transaction)
        } catch {
            if !touchedIndex.isEmpty { touchedIndex[NameBytes(bytes: nameBytes)] = nil }  // Not added after all.
            throw error
        }
        touched.append(TouchedKey(nameBytes: nameBytes, name: key.name, old: current, new: current))
        return next
    }

    @inline(__always)
    private static func valueOrInsert(_ value: inout Int) -> Int { value }

    /// Writes `bytes` (nil removes) unless they equal what the transaction already holds; every
    /// write of a value goes through here, so the size limit is checked here.
    /// `position`, when known, is the key's place in `touched`.
    func replace(
        _ key: PersistentDefaults.Keys, with bytes: [UInt8]?, in transaction: Transaction, at position: Int? = nil
    ) throws {
        if let bytes { try core.checkSize(bytes, of: key.name) }
        try checkNotMirrored(key, in: transaction)
        let position = try position ?? touchedPosition(of: key, in: transaction)
        guard bytes != touched.new(at: position) else { return }
        try key.nameBytes.withUnsafeBytes { name in
            if let bytes {
                try bytes.withUnsafeBytes { try transaction.put(core.databases.values, name, $0) }
            } else {
                try transaction.delete(core.databases.values, name)
            }
        }
        touched.setNew(bytes, at: position)
    }

    private func recordingFailure(_ body: () throws -> Void) {
        do { try body() } catch { if firstError == nil { firstError = error } }
    }
}
