import Foundation

/// One stored key with its raw bytes, as `pdinspect keys` and `pdinspect dump` list it.
///
/// ```swift
/// for entry in try store.storedEntries(prefix: "window.") {
///     print(entry.name, entry.encodedValue.count, (try? entry.storedValue()) ?? .null)
/// }
/// ```
public struct StoredEntry: Sendable, Equatable {
    /// The key's name (invalid UTF-8 is repaired with U+FFFD).
    public let name: String
    /// The stored bytes: the type tag, then the payload.
    public let encodedValue: [UInt8]
    /// Whether the stored name is valid UTF-8, so that ``name`` is its bytes; when it is not,
    /// ``name`` is the repaired form, which is another key's name.
    package let nameIsUTF8: Bool

    /// Creates an entry.
    public init(name: String, encodedValue: [UInt8]) {
        self.name = name
        self.encodedValue = encodedValue
        nameIsUTF8 = true
    }

    /// An entry of the key whose name is `nameBytes`, as stored.
    init(nameBytes: UnsafeRawBufferPointer, encodedValue: [UInt8]) {
        let valid = String(validating: nameBytes, as: UTF8.self)
        name = valid ?? String(decoding: nameBytes, as: UTF8.self)
        self.encodedValue = encodedValue
        nameIsUTF8 = valid != nil
    }

    /// Whether both entries have the same name, compared by its UTF-8 bytes (a key name is its
    /// bytes), and the same stored bytes.
    public static func == (lhs: StoredEntry, rhs: StoredEntry) -> Bool {
        lhs.name.utf8.elementsEqual(rhs.name.utf8) && lhs.encodedValue == rhs.encodedValue
    }

    /// The decoded value; throws when the bytes are not a valid ``StoredValue``.
    public func storedValue() throws(StoredValueError) -> StoredValue {
        try StoredValue(encodedValue: encodedValue)
    }
}

extension PersistentDefaults {
    /// Every stored key whose name starts with `prefix`, with its bytes, read in one snapshot and
    /// sorted by the names' UTF-8 bytes. Values that do not decode are listed too, so that a tool
    /// can show them instead of failing.
    public func storedEntries(prefix: String = "") throws -> [StoredEntry] {
        try core.environment.withRead { try core.storedEntries(prefix: prefix, in: $0) }
    }

    /// `fsync`s the directory that holds `path`, so that an entry just made or renamed there is
    /// on disk (fsync(2): syncing a file does not make its directory entry durable); for
    /// `pdinspect export`, which renames its file into place. A file system that cannot sync a
    /// directory is left as it is.
    package static func syncDirectory(containing path: String) throws(PersistentDefaultsError) {
        try StoreFiles.syncDirectory(StoreFiles.parentDirectory(of: path))
    }

    /// Checks, without opening it, that `path` holds a complete store: a directory with a
    /// non-empty `data.mdb` whose meta pages are valid and whose pages are all present.
    /// Throws ``PersistentDefaultsError/notAStore(path:reason:)`` or a file-system error.
    package static func checkStore(at path: String) throws(PersistentDefaultsError) {
        _ = try StoreFiles.prepare(path: path, creating: false)
    }

    /// Throws ``PersistentDefaultsError/invalidKeyName(_:reason:)`` when `name` cannot be stored:
    /// it is empty or longer than ``Keys/maximumNameLength`` UTF-8 bytes.
    package static func validateKeyName(_ name: String) throws(PersistentDefaultsError) {
        if let error = Keys.validate(name: name, bytes: name.utf8.count) { throw error }
    }
}

extension StoreView {
    /// ``PersistentDefaults/storedEntries(prefix:)`` as this snapshot or transaction sees it: with
    /// its other reads, one commit's state (`pdinspect describe`, `import --replace`).
    package func storedEntries(prefix: String = "") throws -> [StoredEntry] {
        try core.storedEntries(prefix: prefix, in: try live())
    }
}

extension StoreCore {
    /// Every stored key whose name starts with `prefix`, with its bytes, in `transaction`.
    func storedEntries(prefix: String, in transaction: Transaction) throws -> [StoredEntry] {
        let prefixBytes = Array(prefix.utf8)
        var entries: [StoredEntry] = []
        func visit(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) -> Bool {
            guard key.starts(with: prefixBytes) else { return false }
            // Bytes are copied here: they are valid only until the transaction ends.
            entries.append(StoredEntry(nameBytes: key, encodedValue: Array(value)))
            return true
        }
        if prefixBytes.isEmpty {
            try transaction.forEach(databases.values, visit)
        } else {
            try prefixBytes.withUnsafeBytes { start in
                try transaction.forEach(databases.values, from: start, visit)
            }
        }
        return entries
    }
}

extension WriteTransaction {
    /// Removes the key named `name` in this transaction, as `pdinspect import --replace` does.
    public func removeValue(named name: String) throws {
        try remove(PersistentDefaults.Keys(name: name))
    }
}
