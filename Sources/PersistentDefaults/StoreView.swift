/// What a ``Snapshot`` and a ``WriteTransaction`` both read: the store as one transaction sees
/// it.
///
/// ```swift
/// let names = try store.read { snapshot in try snapshot.keyNames() }
/// try store.write { tx in
///     if try !tx.contains(.launchCount) { tx[.launchCount] = 1 }
/// }
/// ```
///
/// Valid only inside the closure it was passed to: a kept reference throws
/// ``PersistentDefaultsError/usedAfterClosure(type:)`` afterwards, and its non-throwing
/// subscripts read defaults.
public class StoreView {
    // Strong: a kept reference must throw, not trap, after the store is released.
    let core: StoreCore
    let transaction: Transaction
    private var isValid = true
    /// The public type's name, for ``PersistentDefaultsError/usedAfterClosure(type:)``.
    private let typeName: String

    init(core: StoreCore, transaction: Transaction, typeName: String) {
        self.core = core
        self.transaction = transaction
        self.typeName = typeName
    }

    /// Ends the view: the closure it was passed to returned.
    func invalidate() { isValid = false }

    /// The transaction, while the closure runs.
    final func live() throws -> Transaction {
        guard isValid else { throw PersistentDefaultsError.usedAfterClosure(type: typeName) }
        return transaction
    }

    /// The key's value; its default when the value does not decode (reported once) or the
    /// closure has returned.
    final func valueOrDefault<Value>(_ key: PersistentDefaults.Key<Value>) -> Value {
        guard isValid else { return key.defaultValue }
        return core.valueOrDefault(key, in: transaction)
    }

    /// The key's value as this transaction sees it; throws when it does not decode.
    public final func value<Value>(for key: PersistentDefaults.Key<Value>) throws -> Value {
        try core.value(key, in: try live())
    }

    /// A key type's value as this transaction sees it.
    public final func value<K: PersistentDefaultsKey>(for key: K) throws -> K.Value
    where K.Conversion.Stored: Codable {
        try value(for: K.key)
    }

    /// Whether a value is stored for the key.
    public final func contains(_ key: PersistentDefaults.Keys) throws -> Bool {
        try key.validate()
        return try core.encodedValue(named: key.nameBytes, in: try live()) != nil
    }

    /// The stored value of the key named `name`, untyped.
    public final func storedValue(named name: String) throws -> StoredValue? {
        try core.storedValue(named: name, in: try live())
    }

    /// The names of all stored keys, sorted by their UTF-8 bytes.
    public final func keyNames() throws -> [String] { try core.keyNames(in: try live()) }

    /// The declaration of the key named `name` as this transaction sees it; nil when undeclared.
    public final func declaration(named name: String) throws -> KeyDeclaration? {
        try core.declaration(named: Array(name.utf8), in: try live())
    }
}
