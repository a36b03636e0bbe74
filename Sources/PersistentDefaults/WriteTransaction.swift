#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

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
    // `@exclusivity(unchecked)` on the per-key state: a transaction is used by one thread, inside
    // the closure it was passed to, and no access to these properties calls out to user code
    // while it lasts, so no two accesses overlap; the dynamic checks cost ~430 instructions per
    // key of a transaction (callgrind).
    @exclusivity(unchecked) private var firstError: (any Error)?
    /// Each key touched, in the order first touched: the name's UTF-8 bytes (a key name is its
    /// bytes: names that `String` equality calls equal, such as NFC and NFD forms, are different
    /// keys), the name, and the value's bytes before the transaction and now.
    @exclusivity(unchecked) private var touched = TouchedKeys()
    /// The bytes of the touched keys' values.
    @exclusivity(unchecked) private var values = ValueBytes()
    /// At least the bytes of the changes `finish()` logs: each write adds its change's size
    /// (a key written twice counts twice), so the log's section is sized without another pass.
    @exclusivity(unchecked) private var loggedBytesBound = 0
    /// The position in `touched` of each name, kept once more than `linearSearchLimit` keys are
    /// touched; a transaction of a few keys finds them by comparing bytes, without hashing.
    @exclusivity(unchecked) private var touchedIndex = NameIndex()
    /// The cursor on the values database through which each touched key is first read and then
    /// written: one B-tree descent per key (see `WriteCursor`); opened at the first touch and
    /// closed by `invalidate()`, before the transaction ends.
    @exclusivity(unchecked) private var cursor: WriteCursor?
    /// The position in `touched` of the key the cursor stands on, when that key is stored: the
    /// next write of it replaces the value in place. Nil after anything else moved the cursor.
    @exclusivity(unchecked) private var cursorKey: Int?
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
        /// The key as first touched: its name, the name's bytes and their hashes.
        let key: PersistentDefaults.Keys
        /// The value before the transaction.
        let old: Held
        /// The value now.
        var new: Held
        /// Whether `new` differs from `old`: set by each write, which compares the value it
        /// writes with `old` only when the key was written before (else the value now is
        /// `old`, which the write already compared), so `finish()` compares nothing.
        var changed = false

        /// Sets `new` and `changed` in one access (two cost two uniqueness checks of the array).
        mutating func setNew(_ held: Held, changed: Bool) {
            new = held
            self.changed = changed
        }
    }

    /// A value the transaction holds for a key: none, a value read from the store, or a value
    /// written; each as its bytes' range in `values`, one buffer for every key, so that reading
    /// or writing a key allocates nothing of its own — except a large value written, which
    /// keeps the array it was encoded into (copying it would cost more than an allocation),
    /// as its index in `values.large` (so that `Held` stays a plain value, copied without a
    /// retain).
    private enum Held {
        case absent
        case read(Range<Int>)
        case written(Range<Int>)
        case large(index: Int, count: Int)

        /// The value's size in bytes; nil when absent.
        var count: Int? {
            switch self {
            case .absent: nil
            case .read(let range), .written(let range): range.count
            case .large(_, let count): count
            }
        }

        /// Whether `a` and `b` are the same read value or both absent (a key not yet written).
        static func same(_ a: Held, _ b: Held) -> Bool {
            switch (a, b) {
            case (.absent, .absent): true
            case (.read(let x), .read(let y)): x == y
            default: false
            }
        }
    }

    /// The bytes of every value a transaction read or wrote, one after the other (see `Held`),
    /// in a `ByteBuffer`: appending a few bytes costs a few instructions.
    private struct ValueBytes: ~Copyable {
        var buffer = ByteBuffer(capacity: 1024)
        /// The large values written (see `Held.large`).
        private var large: [[UInt8]] = []
        /// Whether a `.large` value was written: `finish()` then logs the changes as arrays.
        var holdsLarge: Bool { !large.isEmpty }

        /// Values written larger than this keep their own array. A 1 MiB value copied into the
        /// buffer and again into the record made a bounded `set` of it 1.33× slower (pdbench
        /// `set/data-1mib`: the copies and the page faults of the grown buffer).
        static let largeValue = 4_096

        /// The bytes of `held`, copied out; nil when absent.
        func copy(of held: Held) -> [UInt8]? {
            switch held {
            case .absent: nil
            case .read(let range), .written(let range): Array(buffer.bytes(range))
            case .large(let index, _): large[index]
            }
        }

        /// Calls `body` with the bytes of `held`, nil when absent; valid only inside `body`.
        @inline(__always)
        func withBytes<R>(of held: Held, _ body: (UnsafeRawBufferPointer?) throws -> R) rethrows -> R {
            switch held {
            case .absent: try body(nil)
            case .read(let range), .written(let range): try body(buffer.bytes(range))
            case .large(let index, _): try large[index].withUnsafeBytes { try body($0) }
            }
        }

        /// Whether `held` is `other` (nil: absent).
        @inline(__always)
        func holds(_ held: Held, _ other: UnsafeRawBufferPointer?) -> Bool {
            withBytes(of: held) { bytes in
                guard let bytes, let other else { return bytes == nil && other == nil }
                guard bytes.count == other.count else { return false }
                return bytes.isEmpty || bytes.baseAddress!.bytesEqual(other.baseAddress!, count: bytes.count)
            }
        }

        /// Whether `held` is what `other` holds (both absent, or the same bytes).
        @inline(__always)
        func holds(_ held: Held, _ other: Held) -> Bool { withBytes(of: other) { holds(held, $0) } }

        /// The first byte (the type tag) of `held`; nil when absent or empty.
        @inline(__always)
        func tag(of held: Held) -> UInt8? {
            switch held {
            case .absent: nil
            case .read(let range), .written(let range): range.isEmpty ? nil : buffer.byte(at: range.lowerBound)
            case .large(let index, _): large[index].first
            }
        }

        /// Appends `stored`, read from the store.
        mutating func read(_ stored: UnsafeRawBufferPointer) -> Held {
            let start = buffer.count
            buffer.append(stored)
            return .read(start..<buffer.count)
        }

        /// Appends `written`, a value to write; a large one keeps its array.
        mutating func write(_ written: [UInt8]) -> Held {
            if written.count > Self.largeValue {
                large.append(written)
                return .large(index: large.count - 1, count: written.count)
            }
            let start = buffer.count
            written.withUnsafeBytes { buffer.append($0) }
            return .written(start..<buffer.count)
        }

        /// Appends the value to write that `body` appends; when `body` throws, nothing is kept.
        mutating func write(_ body: (inout ByteBuffer) throws -> Void) rethrows -> Held {
            let start = buffer.count
            do {
                try body(&buffer)
            } catch {
                buffer.truncate(to: start)
                throw error
            }
            return .written(start..<buffer.count)
        }
    }

    /// The keys a transaction touched; the first is held inline, so that a single-key `set`
    /// allocates no array for it.
    private struct TouchedKeys: ~Copyable {
        private var first: TouchedKey?
        /// The keys after the first: an array's uniqueness and bounds checks on every read and
        /// write of an entry, and its copy of the entries (a retain each) when it grows, cost ~90
        /// instructions a key of a 1,000-key transaction (callgrind).
        private var rest = GrowingStorage<TouchedKey>(minimumCapacity: 16)

        var count: Int { first == nil ? 0 : 1 + rest.count }

        /// Sizes the storage for `count` keys once it grows past its first allocation.
        mutating func expect(_ count: Int) { rest.expectedCount = count - 1 }

        /// The entry at `position` past the first (`0 < position < count`).
        @inline(__always)
        private func entry(_ position: Int) -> UnsafeMutablePointer<TouchedKey> { rest.element(position - 1) }

        // Field by field, not the whole entry: copying an entry out retains its references.

        func key(at position: Int) -> PersistentDefaults.Keys {
            position == 0 ? first!.key : entry(position).pointee.key
        }

        /// Calls `body` with the key at `position`, without retaining it: `touched` holds it for
        /// as long as `body` runs (a retain and release per key of `finish()` cost ~40
        /// instructions).
        @inline(__always)
        func withKey<R>(at position: Int, _ body: (PersistentDefaults.Keys) throws -> R) rethrows -> R {
            let key =
                position == 0
                ? Unmanaged.passUnretained(first!.key) : Unmanaged.passUnretained(entry(position).pointee.key)
            return try key._withUnsafeGuaranteedRef(body)
        }

        func old(at position: Int) -> Held { position == 0 ? first!.old : entry(position).pointee.old }

        func new(at position: Int) -> Held { position == 0 ? first!.new : entry(position).pointee.new }

        func changed(at position: Int) -> Bool { position == 0 ? first!.changed : entry(position).pointee.changed }

        mutating func setNew(_ held: Held, changed: Bool, at position: Int) {
            if position == 0 {
                first!.setNew(held, changed: changed)
            } else {
                entry(position).pointee.setNew(held, changed: changed)
            }
        }

        /// Adds a key not touched before, with what it holds in the store.
        mutating func append(_ key: PersistentDefaults.Keys, holding held: Held) {
            let touched = TouchedKey(key: key, old: held, new: held)
            if first == nil { first = touched } else { rest.append(touched) }
        }

        /// The position of the key named as `key`, by comparing bytes.
        func position(of key: PersistentDefaults.Keys) -> Int? {
            guard let first else { return nil }
            if Self.sameName(first.key, key) { return 0 }
            for position in 1..<count where Self.sameName(entry(position).pointee.key, key) { return position }
            return nil
        }

        /// Whether two keys have the same name bytes; the same key object at once.
        static func sameName(_ a: PersistentDefaults.Keys, _ b: PersistentDefaults.Keys) -> Bool {
            a === b || (a.indexHash == b.indexHash && a.nameBytes == b.nameBytes)
        }
    }

    /// Whether `storedForm` may keep a held form instead of a value encoded with `tag`: only
    /// when that tag, or that of a value the key at `position` held before the transaction or
    /// holds now, is one whose equal values may have different bytes (JSON, the old date form).
    /// Checked before calling the generic `storedForm`, which costs ~150 instructions a call.
    @inline(__always)
    private func mayKeepHeldForm(insteadOf tag: UInt8?, at position: Int) -> Bool {
        Self.mayEncodeEqualValuesDifferently(tag)
            || Self.mayEncodeEqualValuesDifferently(values.tag(of: touched.old(at: position)))
            || Self.mayEncodeEqualValuesDifferently(values.tag(of: touched.new(at: position)))
    }

    private static let linearSearchLimit = 8

    /// The positions of touched names by a hash of their bytes: open addressing with linear
    /// probing in a table at most half full. The hash is the key's `indexHash`, made once with
    /// the key (`FNV1a.seededHash`: a random seed per process, so that names chosen to collide,
    /// say in an imported file, cannot be prepared in advance); a `Dictionary` keyed by the bytes
    /// ran SipHash on every lookup and again on each of its resizes (callgrind, a 1,000-key
    /// transaction: ~800 instructions a key).
    private struct NameIndex: ~Copyable {
        /// Position + 1 per slot, 0 when empty; `slotCount` is a power of two. Memory of its own,
        /// not arrays: an array's uniqueness and bounds checks on every probe and store cost ~50
        /// instructions a key of a 1,000-key transaction (callgrind).
        private var slots: UnsafeMutablePointer<Int32>?
        private var slotCount = 0
        /// The hash of the name at each position.
        private var hashes = GrowingStorage<UInt64>(minimumCapacity: 64)

        init() {}

        deinit { slots?.deallocate() }

        var isEmpty: Bool { hashes.count == 0 }

        /// How many names the index is expected to hold: it is first built with room for them.
        private var expectedCount = 0

        mutating func expect(_ count: Int) {
            expectedCount = count
            hashes.expectedCount = count
        }

        /// The position of a name whose hash is `hash` and whose bytes `matches` accepts.
        func position(hash: UInt64, where matches: (Int) -> Bool) -> Int? {
            guard let slots else { return nil }
            let mask = slotCount - 1
            var slot = Int(truncatingIfNeeded: hash) & mask
            while slots[slot] != 0 {
                let position = Int(slots[slot]) - 1
                if hashes.element(position).pointee == hash, matches(position) { return position }
                slot = (slot + 1) & mask
            }
            return nil
        }

        /// Adds the name at the next position (the count of names added so far).
        @inline(__always)
        mutating func append(hash: UInt64) {
            hashes.append(hash)
            if hashes.count * 2 > slotCount { rebuildSlots() } else { place(hashes.count - 1) }
        }

        /// Four times larger: fewer rebuilds, each placing every name again.
        private mutating func rebuildSlots() {
            slots?.deallocate()
            slotCount = max(128, slotCount * 4)
            // Towards the expected size, by at most 64 times what the names need now.
            while slotCount < min(expectedCount, hashes.count * 64) * 2 { slotCount *= 2 }
            let made = UnsafeMutablePointer<Int32>.allocate(capacity: slotCount)
            made.initialize(repeating: 0, count: slotCount)
            slots = made
            for position in 0..<hashes.count { place(position) }
        }

        @inline(__always)
        private func place(_ position: Int) {
            guard let slots else { return }
            let mask = slotCount - 1
            var slot = Int(truncatingIfNeeded: hashes.element(position).pointee) & mask
            while slots[slot] != 0 { slot = (slot + 1) & mask }
            slots[slot] = Int32(truncatingIfNeeded: position + 1)
        }
    }

    init(core: StoreCore, transaction: Transaction, cache: CommitCache? = nil) {
        cachedLastSequence = cache?.lastSequence
        mirrorOwners = cache?.mirrorOwners
        // Sized like the previous transaction once they grow: a run of 1,000-key transactions
        // moved its keys and values four or five times each (callgrind: ~60 instructions a key).
        let expected = core.writeSizeHint
        touched.expect(expected.keys)
        touchedIndex.expect(expected.keys)
        values.buffer.expectedCapacity = expected.bytes
        super.init(core: core, transaction: transaction, typeName: "WriteTransaction")
    }

    /// How many keys the transaction touched and how many bytes of their values it holds: the
    /// next transaction's size hint (`StoreCore.writeSizeHint`).
    var size: (keys: Int, bytes: Int) { (touched.count, values.buffer.count) }

    /// Ends the transaction's use and closes its cursor; the store calls this before the LMDB
    /// transaction commits or aborts.
    override func invalidate() {
        cursor?.close()
        cursor = nil
        cursorKey = nil
        super.invalidate()
    }

    /// The values database's cursor, opened at the first use.
    private func valuesCursor(_ transaction: Transaction) throws -> WriteCursor {
        if let cursor { return cursor }
        let opened = try WriteCursor(core.databases.values, in: transaction)
        cursor = opened
        return opened
    }

    /// Logs the changes; nil when nothing changed. Throws the first failed subscript write.
    func finish() throws -> CommitRecord? {
        if let firstError { throw firstError }
        if values.holdsLarge { return try finishWithArrays() }
        // The changes go straight into their log form; the record decodes them only for
        // somebody who asks (an observer, a reader of the record).
        var mask: UInt64 = 0
        let changes = EncodedChanges(capacity: loggedBytesBound) { writer in
            var count = 0
            for position in 0..<touched.count {
                guard let new = changedValue(at: position) else { continue }
                touched.withKey(at: position) { key in
                    // `nameBuffer`, not `nameBytes.withUnsafeBytes`: the array's retain and release.
                    values.withBytes(of: new) {
                        CommitRecord.appendChange(named: key.nameBuffer, value: $0, to: &writer)
                    }
                    mask |= WakeChannel.bit(ofNameHash: key.nameHash)
                }
                count += 1
            }
            return count
        }
        guard changes.count > 0 || logsWithoutValueChanges else { return nil }
        return try core.appendLog(
            changes, mask: mask, cachedLastSequence: cachedLastSequence,
            in: transaction)
    }

    /// `finish()` of a transaction that wrote a large value: the changes as values, each
    /// holding its array (a large one without a copy), not as one section of copies.
    private func finishWithArrays() throws -> CommitRecord? {
        var changes: [CommitRecord.Change] = []
        var mask: UInt64 = 0
        for position in 0..<touched.count {
            guard let new = changedValue(at: position) else { continue }
            let key = touched.key(at: position)
            changes.append(CommitRecord.Change(key: key.name, encodedValue: values.copy(of: new)))
            mask |= WakeChannel.bit(ofNameHash: key.nameHash)
        }
        guard !changes.isEmpty || logsWithoutValueChanges else { return nil }
        return try core.appendLog(changes, mask: mask, cachedLastSequence: cachedLastSequence, in: transaction)
    }

    /// The value the key at `position` holds now, when it differs from what it held before.
    @inline(__always)
    private func changedValue(at position: Int) -> Held? {
        touched.changed(at: position) ? touched.new(at: position) : nil
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
        if key.shouldRemove == nil, !key.removesNil, key.shouldOverwrite == nil, key.codec.encodeAppending != nil {
            return try setEncodingInPlace(value, for: key)
        }
        try set(value, encoded: try core.encode(value, for: key), for: key)
    }

    /// `set` of a key without removal or overwrite hooks whose codec appends: the value is
    /// encoded straight into the transaction's buffer, without an array of its own.
    private func setEncodingInPlace<Value>(_ value: Value, for key: PersistentDefaults.Key<Value>) throws {
        let transaction = try live()
        let encoded = try values.write { buffer in
            if key.encodesFixedWidth, appendFixedWidth(value, to: &buffer) { return }
            try core.encode(value, for: key, appendingTo: &buffer)
        }
        let position = key.isEqual == nil ? nil : try touchedPosition(of: key, in: transaction)
        if let position, mayKeepHeldForm(insteadOf: values.tag(of: encoded), at: position) {
            let bytes = values.copy(of: encoded) ?? []
            return try replace(
                key, with: storedForm(of: value, encoded: bytes, for: key, at: position), in: transaction, at: position)
        }
        try replace(key, written: encoded, in: transaction, at: position)
    }

    /// Stores `value`, already encoded, applying the key's hooks. Without `decodingHeld`, held
    /// bytes that differ from `encoded` are not decoded to compare them with `value` (see
    /// `storedForm`): the caller compared the stored value outside the transaction.
    func set<Value>(
        _ value: Value, encoded: [UInt8], for key: PersistentDefaults.Key<Value>, decodingHeld: Bool = true
    ) throws {
        let transaction = try live()
        if key.shouldRemove?(value) == true || (key.removesNil && encoded == [StoredValue.Tag.null.rawValue]) {
            return try replace(key, with: nil, in: transaction)
        }
        if key.shouldOverwrite != nil, try !overwrites(key, with: value, in: transaction) { return }
        // Found once for both steps: a transaction of many keys hashes each name once.
        let position = key.isEqual == nil ? nil : try touchedPosition(of: key, in: transaction)
        var bytes = encoded
        if decodingHeld, let position, mayKeepHeldForm(insteadOf: encoded.first, at: position) {
            bytes = storedForm(of: value, encoded: encoded, for: key, at: position)
        }
        try replace(key, with: bytes, in: transaction, at: position)
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
        let new = touched.new(at: position)
        let old = touched.old(at: position)
        /// The held bytes when they decode to a value equal to `value`; only JSON and the old
        /// date form can encode an equal value differently, every other tag's bytes are
        /// canonical, so for those comparing bytes is enough (and saves a decode and a copy).
        func equalForm(_ held: Held) -> [UInt8]? {
            guard let tag = values.tag(of: held),
                Self.mayEncodeEqualValuesDifferently(tag) || Self.mayEncodeEqualValuesDifferently(encoded.first),
                let bytes = values.copy(of: held)
            else { return nil }
            // Bytes this process last stored or read are compared as the value they encode.
            if let known = bytes.withUnsafeBytes({ key.knownValue(of: $0) }) {
                return isEqual(known, value) ? bytes : nil
            }
            return Self.decodes(bytes, toEqualOf: value, with: key.codec, isEqual: isEqual) ? bytes : nil
        }
        // Held bytes equal to `encoded` are kept as `encoded`: the same bytes, no copy.
        if encoded.withUnsafeBytes({ values.holds(new, $0) }) { return encoded }
        if let held = equalForm(new) { return held }
        if Held.same(old, new) { return encoded }
        if encoded.withUnsafeBytes({ values.holds(old, $0) }) { return encoded }
        return equalForm(old) ?? encoded
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

    /// Whether the key's `shouldOverwrite` hook lets `value` replace the stored value (always,
    /// when nothing is stored or it does not decode: such a value is replaced, not compared).
    /// Its own function: the `Value?` it works with costs a generic metadata lookup per call
    /// (the library's generic code runs unspecialised), which the common path should not pay.
    @inline(never)
    private func overwrites<Value>(
        _ key: PersistentDefaults.Key<Value>, with value: Value, in transaction: Transaction
    ) throws -> Bool {
        guard let shouldOverwrite = key.shouldOverwrite,
            let bytes = try core.encodedValue(named: key.nameBytes, in: transaction),
            let old = try? key.codec.decode(bytes)
        else { return true }
        return shouldOverwrite(old, value)
    }

    /// Whether `held` decodes to a value equal (`isEqual`) to `value`; false when it does not
    /// decode (held bytes that no longer decode are replaced, not compared). Its own function
    /// for the reason `overwrites` gives.
    @inline(never)
    private static func decodes<Value>(
        _ held: [UInt8], toEqualOf value: Value, with codec: ValueCodec<Value>, isEqual: (Value, Value) -> Bool
    ) -> Bool {
        guard let heldValue = try? codec.decode(held) else { return false }
        return isEqual(heldValue, value)
    }

    /// Whether an encoded value's tag is one whose equal values may have different bytes.
    static func mayEncodeEqualValuesDifferently(_ tag: UInt8?) -> Bool {
        tag == StoredValue.Tag.json.rawValue || tag == StoredValue.legacyDateTag
    }

    /// The key's position in `touched`; a key not yet touched is added with the bytes it holds.
    @inline(__always)
    private func touchedPosition(of key: PersistentDefaults.Keys, in transaction: Transaction) throws -> Int {
        let next = touched.count
        var hash: UInt64?
        if next <= Self.linearSearchLimit {
            if let position = touched.position(of: key) { return position }
        } else {
            if touchedIndex.isEmpty {
                for position in 0..<next { touchedIndex.append(hash: touched.withKey(at: position) { $0.indexHash }) }
            }
            let nameHash = key.indexHash
            if let position = touchedIndex.position(
                hash: nameHash, where: { touched.withKey(at: $0) { TouchedKeys.sameName($0, key) } })
            {
                return position
            }
            hash = nameHash
        }
        // Read before adding: a failed read leaves `touched` and the index as they were.
        cursorKey = nil
        let cursor = try valuesCursor(transaction)
        let found = try key.nameBytes.withUnsafeBytes { name in
            try cursor.find(name) { stored in
                touched.append(key, holding: stored.map { values.read($0) } ?? .absent)
                return stored != nil
            }
        }
        if let hash { touchedIndex.append(hash: hash) }
        if found { cursorKey = next }
        return next
    }

    /// Writes `bytes` for `key` when the key holds `expected` in this transaction (nil: it is
    /// not stored), as `replace` does, and returns true; else writes nothing and returns false.
    /// For a `set` whose hooks were asked about `expected` before the transaction began.
    func replace(_ key: PersistentDefaults.Keys, with bytes: [UInt8], ifHolding expected: [UInt8]?) throws -> Bool {
        let transaction = try live()
        let position = try touchedPosition(of: key, in: transaction)
        let holds =
            if let expected {
                expected.withUnsafeBytes { values.holds(touched.new(at: position), $0) }
            } else {
                values.holds(touched.new(at: position), nil)
            }
        guard holds else { return false }
        try replace(key, with: bytes, in: transaction, at: position)
        return true
    }

    /// Writes `bytes` (nil removes) unless they equal what the transaction already holds; every
    /// write of a value goes through here, so the size limit is checked here.
    /// `position`, when known, is the key's place in `touched`.
    func replace(
        _ key: PersistentDefaults.Keys, with bytes: [UInt8]?, in transaction: Transaction, at position: Int? = nil
    ) throws {
        // Before the copy into the buffer, too: a value over the limit is not copied.
        if let bytes { try core.checkSize(bytes.count, of: key.name) }
        try replace(key, written: bytes.map { values.write($0) } ?? .absent, in: transaction, at: position)
    }

    /// `replace` with the new value already in the transaction's buffer (`.absent` removes).
    @inline(__always)
    private func replace(
        _ key: PersistentDefaults.Keys, written new: Held, in transaction: Transaction, at position: Int?
    ) throws {
        if let count = new.count { try core.checkSize(count, of: key.name) }
        try checkNotMirrored(key, in: transaction)
        let position = try position ?? touchedPosition(of: key, in: transaction)
        let current = touched.new(at: position)
        guard !values.holds(current, new) else { return }
        let old = touched.old(at: position)
        // Not written before: the value now is the old one, which `new` differs from.
        let changed = Held.same(old, current) || !values.holds(old, new)
        let cursor = try valuesCursor(transaction)
        let atKey = cursorKey == position
        cursorKey = nil
        try key.nameBytes.withUnsafeBytes { name in
            try values.withBytes(of: new) { value in
                if let value {
                    try cursor.put(name, value, atKey: atKey)
                } else {
                    try cursor.delete(name, atKey: atKey)
                }
            }
        }
        touched.setNew(new, changed: changed, at: position)
        loggedBytesBound += CommitRecord.encodedChangeSize(nameCount: key.nameBytes.count, valueCount: new.count)
        if new.count != nil { cursorKey = position }
    }

    private func recordingFailure(_ body: () throws -> Void) {
        do { try body() } catch { if firstError == nil { firstError = error } }
    }
}

/// Elements appended one at a time in memory of their own, for a write transaction's per-key
/// tables: no uniqueness or bounds checks on access (an array's cost ~50–90 instructions a key of
/// a 1,000-key transaction, callgrind), and moved, not copied with a retain each, when it grows.
/// Indices below `count` only.
private struct GrowingStorage<Element>: ~Copyable {
    private var base: UnsafeMutablePointer<Element>?
    private var capacity = 0
    private let minimumCapacity: Int
    /// How many elements are appended.
    private(set) var count = 0

    init(minimumCapacity: Int) { self.minimumCapacity = minimumCapacity }

    deinit {
        if let base {
            base.deinitialize(count: count)
            base.deallocate()
        }
    }

    /// The element at `index` (below `count`).
    @inline(__always)
    func element(_ index: Int) -> UnsafeMutablePointer<Element> { base.unsafelyUnwrapped + index }

    @inline(__always)
    mutating func append(_ element: consuming Element) {
        if count == capacity { grow() }
        (base.unsafelyUnwrapped + count).initialize(to: element)
        count += 1
    }

    /// How many elements the storage is expected to take (the previous transaction's count):
    /// past `minimumCapacity` it grows towards that in steps of up to 64 times, not by doubling,
    /// so a small transaction allocates no more than before, a large one moves its elements
    /// once or twice, and one of 20 keys after an import of 60,000 does not allocate for 60,000.
    var expectedCount = 0

    private mutating func grow() {
        let newCapacity =
            capacity == 0 ? minimumCapacity : max(minimumCapacity, grownCapacity(capacity, expected: expectedCount))
        let grown = UnsafeMutablePointer<Element>.allocate(capacity: newCapacity)
        if let base {
            grown.moveInitialize(from: base, count: count)
            base.deallocate()
        }
        base = grown
        capacity = newCapacity
    }
}
