import Synchronization

/// A key declared as a type: its name, default, hooks and conversion are static members.
///
/// ```swift
/// struct FirstLaunchKey: PersistentDefaultsKey { static let defaultValue = false }
/// extension PersistentDefaultsKey where Self == FirstLaunchKey {
///     static var firstLaunch: Self { Self() }
/// }
/// store[.firstLaunch] = true
/// ```
///
/// The stored name is ``name``: by default the type's name without a trailing `Key`, with a
/// lower-case first letter (`FirstLaunchKey` → `firstLaunch`). Override it to keep an old name.
public protocol PersistentDefaultsKey: Sendable {
    /// The type of the key's value.
    associatedtype Value: Sendable
    /// How the value is stored; by default as it is.
    associatedtype Conversion: ValueConversion = PassthroughConversion<Value>
    where Conversion.Value == Value

    /// The value read while the key is not stored.
    static var defaultValue: Value { get }
    /// The key's name in the store.
    static var name: String { get }
    /// Whether setting `value` removes the key instead. Default: the value equals the default.
    static func shouldRemove(_ value: Value) -> Bool
    /// Whether `newValue` replaces the stored `oldValue`. Default: they differ. Not asked while
    /// the key is not stored: the first value is always written.
    static func shouldOverwrite(_ oldValue: Value, _ newValue: Value) -> Bool
    /// Creates the key; keys carry no state.
    init()
}

extension PersistentDefaultsKey {
    /// The type name without a trailing `Key`, first letter lower-cased.
    public static var name: String {
        var name = String(describing: Self.self)
        if name.hasSuffix("Key"), name.count > 3 { name.removeLast(3) }
        return name.prefix(1).lowercased() + name.dropFirst()
    }

    /// Never removes: the value type cannot be compared with the default.
    public static func shouldRemove(_ value: Value) -> Bool { false }
    /// Always overwrites: the value type cannot be compared.
    public static func shouldOverwrite(_ oldValue: Value, _ newValue: Value) -> Bool { true }
}

extension PersistentDefaultsKey where Value: Equatable {
    /// Removes the key when the value equals the default, so reads fall back to it.
    public static func shouldRemove(_ value: Value) -> Bool { value == defaultValue }
    /// Rewrites only a value that changed.
    public static func shouldOverwrite(_ oldValue: Value, _ newValue: Value) -> Bool { oldValue != newValue }
}

/// Converts a key's value to the value that is stored and back.
///
/// ```swift
/// struct IntBoolConversion: ValueConversion {      // stored as Int, read as Bool
///     static func decode(data: Int) -> Bool { data > 0 }
///     static func encode(value: Bool) -> Int { value ? 1 : 0 }
/// }
/// ```
public protocol ValueConversion {
    /// The type the key reads and writes.
    associatedtype Value
    /// The type kept in the store.
    associatedtype Stored
    /// Converts a stored value to the key's value; throw to report a value that does not convert.
    static func decode(data: Stored) throws -> Value
    /// Converts the key's value to the value to store.
    static func encode(value: Value) throws -> Stored
}

/// The conversion that stores a value as it is.
public enum PassthroughConversion<Value>: ValueConversion {
    /// Returns the stored value.
    public static func decode(data: Value) -> Value { data }
    /// Returns the value.
    public static func encode(value: Value) -> Value { value }
}

extension PersistentDefaultsKey where Conversion.Stored: Codable {
    /// The typed key that this key type describes, made once per type.
    static var key: PersistentDefaults.Key<Value> { KeyTypeCache.key(for: Self.self) }
}

/// The `Key` of each key type, so that names and codecs are worked out once.
enum KeyTypeCache {
    private static let keys = Locked<[ObjectIdentifier: any Sendable]>([:])

    static func key<K: PersistentDefaultsKey>(for type: K.Type) -> PersistentDefaults.Key<K.Value>
    where K.Conversion.Stored: Codable {
        let id = ObjectIdentifier(type)
        if let key = keys.withLock({ $0[id] }) as? PersistentDefaults.Key<K.Value> { return key }
        let key = PersistentDefaults.Key<K.Value>(
            name: K.name, defaultValue: K.defaultValue, codec: .converting(through: K.Conversion.self),
            shouldRemove: { K.shouldRemove($0) }, shouldOverwrite: { K.shouldOverwrite($0, $1) })
        keys.withLock { $0[id] = key }
        return key
    }
}

/// A key type whose value is any `Codable`, stored as JSON.
///
/// ```swift
/// struct LayoutKey: CodableDefaultsKey { static let defaultValue = Layout() }
/// ```
public protocol CodableDefaultsKey: PersistentDefaultsKey where Value: Codable {}
