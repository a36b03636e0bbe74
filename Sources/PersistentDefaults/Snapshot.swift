/// A consistent, read-only view of the store, passed to ``PersistentDefaults/read(_:)``.
///
/// ```swift
/// let (count, frame) = try store.read { snapshot in (snapshot[.launchCount], snapshot[.frame]) }
/// ```
///
/// Every read in one snapshot sees the same committed state. Valid only inside the closure.
public final class Snapshot: StoreView {
    init(core: StoreCore, transaction: Transaction) {
        super.init(core: core, transaction: transaction, typeName: "Snapshot")
    }

    /// The key's value; a value that does not decode reads as the default (reported once).
    public subscript<Value>(key: PersistentDefaults.Key<Value>) -> Value { valueOrDefault(key) }

    /// A key type's value.
    public subscript<K: PersistentDefaultsKey>(key: K) -> K.Value where K.Conversion.Stored: Codable { self[K.key] }

    /// The commit-log records after `sequence`, oldest first.
    public func commits(after sequence: UInt64, limit: Int = .max) throws -> [CommitRecord] {
        try core.commits(after: sequence, limit: limit, in: try live())
    }
}
