import Foundation

/// A migration recorded in the store by ``PersistentDefaults/migrate(to:_:_:)``.
public struct MigrationRecord: Sendable, Equatable, Codable {
    /// The version the store reached.
    public let version: Int
    /// What the migration did, as its author described it.
    public let description: String
    /// When it ran.
    public let date: Date
    /// The process that ran it.
    public let processID: Int32
}

extension PersistentDefaults {
    /// Brings the store to `version` once per store: `body`'s changes are committed in one write
    /// transaction that also records the migration in the store; returns false when the store
    /// already is at `version` or later. Safe to call at every start and from several processes
    /// at once: write transactions are serialised, so exactly one of them commits `body`'s changes.
    ///
    /// Like ``write(_:)``, `body` runs again, in a new transaction, when its writes need a larger
    /// map (a migration that writes more than the store holds: 3 runs for 4 MiB in a new store), and
    /// only the last run commits. Keep effects outside the store (deleting the file whose contents
    /// `body` imports, a message) for after `migrate` returned true.
    ///
    /// ```swift
    /// try store.migrate(to: 2, "theme became an enum; count was a string") { tx in
    ///     try tx.renameKey("appTheme", to: "theme")
    ///     try tx.convertValue(named: "launchCount", from: String.self, to: .launchCount) { Int($0) ?? 0 }
    /// }
    /// ```
    ///
    /// A store already at `version` is only read, so a read-only open gets false too. If `body`
    /// throws, nothing is written and the version stays where it was. The store records
    /// the version as a `UInt32`: a larger one throws
    /// ``PersistentDefaultsError/encodingFailed(key:type:reason:)`` before anything runs. A
    /// recorded version that is not 4 bytes (another tool wrote it) throws
    /// ``PersistentDefaultsError/decodingFailed(key:type:reason:)``, here and in
    /// ``migrationVersion()``, and nothing runs.
    @discardableResult
    public func migrate(to version: Int, _ description: String = "", _ body: (WriteTransaction) throws -> Void)
        throws -> Bool
    {
        // Clamped to UInt32.max, such a version would be recorded as less than itself, and the
        // migration would run again at every call.
        guard version <= Int(UInt32.max) else {
            throw PersistentDefaultsError.encodingFailed(
                key: String(decoding: StoreCore.migrationVersionKey, as: UTF8.self), type: "UInt32",
                reason: "the migration version \(version) is above \(UInt32.max), the largest the store records")
        }
        // The common case, every start after the first: a read. A read-only open gets false
        // instead of `readOnly`, and no write transaction waits for LMDB's writer lock. The
        // transaction checks again: another process may migrate in between.
        guard try migrationVersion() < version else { return false }
        let migrated = try write { transaction in
            guard try transaction.migrationVersion() < version else { return false }
            try body(transaction)
            try transaction.recordMigration(
                MigrationRecord(version: version, description: description, date: Date(), processID: getpid()))
            return true
        }
        // In `.bounded` mode a migration is synced at once, like a store's creation: a power cut
        // before the next interval must not leave it half on disk (see `StoreCore.init`).
        if migrated, case .bounded = core.options.durability { try core.environment.sync() }
        return migrated
    }

    /// The version the store's migrations reached; 0 before the first.
    public func migrationVersion() throws -> Int {
        try core.environment.withRead { transaction in try core.migrationVersion(in: transaction) }
    }

    /// Every migration recorded in the store, oldest first.
    ///
    /// Throws ``PersistentDefaultsError/decodingFailed(key:type:reason:)`` naming the record's
    /// `meta` key when a record does not decode (another tool wrote it).
    public func migrations() throws -> [MigrationRecord] {
        try core.environment.withRead { transaction in
            var records: [MigrationRecord] = []
            try StoreCore.migrationPrefix.withUnsafeBytes { start in
                try transaction.forEach(core.databases.meta, from: start) { key, value in
                    guard key.starts(with: StoreCore.migrationPrefix) else { return false }
                    do {
                        records.append(try JSONDecoder().decode(MigrationRecord.self, from: Data(value)))
                    } catch {
                        throw PersistentDefaultsError.decodingFailed(
                            key: String(decoding: key, as: UTF8.self), type: "MigrationRecord", reason: "\(error)")
                    }
                    return true
                }
            }
            return records
        }
    }
}

extension StoreCore {
    /// Meta key of the migration version (`UInt32` big-endian).
    static let migrationVersionKey = Array("migration-version".utf8)
    /// Meta keys of the migration records: this prefix and the version as 10 decimal digits.
    static let migrationPrefix = Array("migration/".utf8)

    /// Throws ``PersistentDefaultsError/decodingFailed(key:type:reason:)`` when the stored version
    /// is not 4 bytes (another tool wrote it): read anyway, its bytes would give another version,
    /// and migrations would be skipped or run again.
    func migrationVersion(in transaction: Transaction) throws -> Int {
        try Self.migrationVersionKey.withUnsafeBytes { key in
            try transaction.withValue(databases.meta, key) { bytes in
                guard let bytes else { return 0 }
                guard bytes.count == 4 else {
                    throw PersistentDefaultsError.decodingFailed(
                        key: String(decoding: Self.migrationVersionKey, as: UTF8.self), type: "UInt32",
                        reason: "the migration version in meta has \(bytes.count) bytes, not 4")
                }
                return Int(UInt32(bigEndianBytes: bytes))
            }
        }
    }
}

extension WriteTransaction {
    /// The version the store's migrations reached, as this transaction sees it.
    func migrationVersion() throws -> Int { try core.migrationVersion(in: try live()) }

    /// Writes `record` and the new version to the meta database.
    func recordMigration(_ record: MigrationRecord) throws {
        let transaction = try live()
        var version = ByteWriter()
        version.append(UInt32(clamping: record.version))
        let digits = String(record.version)
        let name =
            StoreCore.migrationPrefix + Array((String(repeating: "0", count: max(0, 10 - digits.count)) + digits).utf8)
        let encoded = Array(try JSONEncoder().encode(record))
        try StoreCore.migrationVersionKey.withUnsafeBytes { key in
            try version.bytes.withUnsafeBytes { try transaction.put(core.databases.meta, key, $0) }
        }
        try name.withUnsafeBytes { key in
            try encoded.withUnsafeBytes { try transaction.put(core.databases.meta, key, $0) }
        }
    }

    /// Moves the stored value of `oldName` to `newName` (replacing what was there); does nothing
    /// when `oldName` is not stored. Logged as a removal and a set.
    public func renameKey(_ oldName: String, to newName: String) throws {
        let old = PersistentDefaults.Keys(name: oldName)
        let new = PersistentDefaults.Keys(name: newName)
        try old.validate()
        try new.validate()
        guard old.nameBytes != new.nameBytes, let bytes = try core.encodedValue(named: old.nameBytes, in: try live())
        else {
            return
        }
        try replace(new, with: bytes, in: try live())
        try replace(old, with: nil, in: try live())
    }

    /// Reads the value stored under `name` as `Old`, converts it and stores it for `key` (which
    /// may have the same name) as `set(_:for:)` does, with
    /// the key's hooks: nil for a key whose default is nil removes it, and a key type's
    /// `shouldRemove` and `shouldOverwrite` apply. Does nothing when `name` is not stored. Throws
    /// ``PersistentDefaultsError/decodingFailed(key:type:reason:)`` when the stored value is not
    /// an `Old`, and aborts the migration.
    public func convertValue<Old: Codable & Sendable, New>(
        named name: String, from _: Old.Type, to key: PersistentDefaults.Key<New>, _ transform: (Old) throws -> New
    ) throws {
        let oldKey = PersistentDefaults.Key<Old?>(name)
        guard let old = try value(for: oldKey) else { return }
        let new = try transform(old)
        if oldKey.nameBytes != key.nameBytes { try remove(oldKey) }
        try set(new, for: key)
    }
}
