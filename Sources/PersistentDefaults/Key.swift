import Foundation
// The standard library's reflection SPI: `_forEachField`, to tell from a value type alone
// whether its values can hold class instances (`holdsOnlyValues`).
@_spi(Reflection) import Swift

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension PersistentDefaults {
    /// The namespace of typed keys. Extend it with your keys, then use them as `.name`:
    ///
    /// ```swift
    /// extension PersistentDefaults.Keys {
    ///     static let launchCount = Key<Int>("launchCount", default: 0)
    /// }
    /// store[.launchCount] += 1
    /// ```
    ///
    /// `@unchecked Sendable`: a class so that `Key<Value>` can inherit the static members users
    /// declare here; it holds only immutable, Sendable stored properties.
    public class Keys: @unchecked Sendable {
        /// Lets key declarations inside `extension PersistentDefaults.Keys` say `Key<Int>(…)`.
        public typealias Key = PersistentDefaults.Key

        /// The key's name in the store.
        public let name: String
        /// The name's UTF-8 bytes, as stored.
        let nameBytes: [UInt8]
        /// The same bytes in memory this key owns, for reads: passing them to LMDB needs no
        /// retain of an array buffer that every thread reading the key would share.
        let nameBuffer: UnsafeRawBufferPointer
        /// Why the name cannot be stored, if it cannot.
        let nameError: PersistentDefaultsError?
        /// FNV-1a of the name's bytes, from which the wake-up channel takes the key's bit
        /// (``WakeChannel/nameHash(_:)``); hashed once here, not on every commit of the key.
        let nameHash: UInt64
        /// The name's hash in a write transaction's name index (seeded per process).
        let indexHash: UInt64

        init(name: String) {
            self.name = name
            nameBytes = Array(name.utf8)
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(nameBytes.count, 1), alignment: 1)
            buffer.copyBytes(from: nameBytes)
            nameBuffer = UnsafeRawBufferPointer(rebasing: buffer[..<nameBytes.count])
            nameError = Self.validate(name: name, bytes: nameBytes.count)
            nameHash = WakeChannel.nameHash(nameBytes)
            indexHash = FNV1a.seededHash(nameBytes)
        }

        deinit {
            // The allocation's start; `nameBuffer` spans its first `nameBytes.count` bytes.
            UnsafeMutableRawPointer(mutating: nameBuffer.baseAddress)?.deallocate()
        }

        /// LMDB's key size limit (`mdb_env_get_maxkeysize` with the default build).
        public static let maximumNameLength = 511

        static func validate(name: String, bytes: Int) -> PersistentDefaultsError? {
            if bytes == 0 { return .invalidKeyName(name, reason: "a key name must not be empty") }
            if bytes > maximumNameLength {
                return .invalidKeyName(
                    name, reason: "\(bytes) UTF-8 bytes; at most \(maximumNameLength) are allowed")
            }
            return nil
        }

        /// Throws when the name cannot be stored.
        func validate() throws(PersistentDefaultsError) {
            if let nameError { throw nameError }
        }

        /// What a declaration records of the key's value type: the stored tag, the width of a
        /// type narrower than it, whether `null` is a value, and the encoded default. Every key a
        /// caller can make is a `Key<Value>`, which overrides this; the untyped base has no type
        /// to declare.
        func declaredForm() throws -> DeclaredForm {
            throw PersistentDefaultsError.invalidDeclaration(key: name, reason: "the key has no value type")
        }
    }

    /// A typed key: a name, a value type and the value read when nothing is stored.
    ///
    /// ```swift
    /// let retries = PersistentDefaults.Key<Int>("retries", default: 3)
    /// let username = PersistentDefaults.Key<String?>("username")      // default nil
    /// ```
    ///
    /// Values of any `Codable` type can be stored; see ``StoredValue`` for how each is encoded.
    /// A name that is empty or longer than 511 UTF-8 bytes makes every use of the key throw
    /// ``PersistentDefaultsError/invalidKeyName(_:reason:)``.
    public final class Key<Value: Sendable>: Keys, @unchecked Sendable {
        // @unchecked Sendable: every stored property is immutable; the codec and hook closures
        // capture only metatypes (see `ValueCodec`).

        /// The value read while the key is not stored.
        public let defaultValue: Value
        @usableFromInline let codec: ValueCodec<Value>
        /// Whether a read may decode the stored bytes where LMDB keeps them, inside the read:
        /// only when decoding runs no user code (``ValueCodec/runsUserCode``).
        @usableFromInline let decodesInsideRead: Bool
        /// Whether a write may append the value's bytes itself (`appendFixedWidth`): the key's
        /// codec is its fixed-width type's own, which runs no user code.
        let encodesFixedWidth: Bool
        /// The default's bytes are `null`: setting nil removes the key instead of storing null.
        let removesNil: Bool
        /// A key type's hook: remove instead of storing this value.
        let shouldRemove: ((Value) -> Bool)?
        /// A key type's hook: whether to replace the stored value with a new one.
        let shouldOverwrite: ((Value, Value) -> Bool)?
        /// `==` of `Value` when it is `Equatable`: a set of a value equal to the stored one is no
        /// change, even when the two encode to different bytes.
        let isEqual: ((Value, Value) -> Bool)?
        /// The bytes this process last stored for the key with ``PersistentDefaults/set(_:for:)``
        /// or read with ``PersistentDefaults/value(for:)``, and the value they encode, for a
        /// value type whose decoding is user code (`Codable`, `RawRepresentable`, a conversion):
        /// while the store holds those bytes, a read returns that value and a `set` compares
        /// with it, instead of decoding them again (a JSON read is mostly its decoding; a JSON
        /// set spent 40 % of its instructions decoding the old value). Nil for other types: the
        /// library decodes its own in place, and a type whose values may hold a class instance
        /// anywhere (``holdsOnlyValues(_:)``) is decoded on every read, since every reader of the
        /// remembered value would share the instance — and the caller's changes to one it set:
        /// one reader's change would alter what later reads return, and a set compare equal to
        /// it. Only encodings of at most ``rememberedLimit`` bytes are kept.
        let lastKnown: Locked<(bytes: [UInt8], value: Value)?>?
        /// The largest encoding ``lastKnown`` keeps: a larger one would double the memory its
        /// value takes, for the life of the key.
        static var rememberedLimit: Int { 4_096 }

        init(
            name: String, defaultValue: Value, codec: ValueCodec<Value>,
            shouldRemove: ((Value) -> Bool)? = nil,
            shouldOverwrite: ((Value, Value) -> Bool)? = nil
        ) {
            self.defaultValue = defaultValue
            self.codec = codec
            decodesInsideRead = !codec.runsUserCode
            encodesFixedWidth = !codec.runsUserCode && !codec.isOptional && codec.encodeAppending != nil
            removesNil = (try? codec.encode(defaultValue)) == [StoredValue.Tag.null.rawValue]
            self.shouldRemove = shouldRemove
            self.shouldOverwrite = shouldOverwrite
            isEqual = equality(of: Value.self)
            lastKnown = codec.runsUserCode && holdsOnlyValues(Value.self) ? Locked(nil) : nil
            super.init(name: name)
        }

        /// Decodes stored bytes; a failure becomes ``PersistentDefaultsError/decodingFailed(key:type:reason:)``.
        /// A fixed-width value is read straight from its tag only through the type's own codec
        /// (``decodesInsideRead``): a conversion from `Int` to `Int` must still convert.
        @inlinable
        func decode(_ bytes: UnsafeRawBufferPointer) throws -> Value {
            if decodesInsideRead, let value = decodeFixedWidth(bytes, as: Value.self) { return value }
            do throws(StoredValueError) {
                return try codec.decode(bytes)
            } catch {
                throw PersistentDefaultsError.decodingFailed(
                    key: name, type: "\(Value.self)", reason: error.description)
            }
        }

        /// The value ``lastKnown`` holds for exactly `bytes`, if it does.
        @usableFromInline
        func knownValue(of bytes: UnsafeRawBufferPointer) -> Value? {
            lastKnown?.withLock { known in
                guard let known, known.bytes.count == bytes.count else { return nil }
                let same = known.bytes.withUnsafeBytes { own in
                    bytes.isEmpty || memcmp(own.baseAddress!, bytes.baseAddress!, bytes.count) == 0
                }
                return same ? known.value : nil
            }
        }

        /// Decodes `bytes`, a copy made after the read, and remembers the value (see ``lastKnown``).
        @usableFromInline
        func decodeRemembering(_ bytes: [UInt8]) throws -> Value {
            let value = try bytes.withUnsafeBytes { try decode($0) }
            remember(bytes, encoding: value)
            return value
        }

        /// Remembers that `bytes` encode `value` (see ``lastKnown``).
        func remember(_ bytes: [UInt8], encoding value: Value) {
            guard let lastKnown, bytes.count <= Self.rememberedLimit else { return }
            lastKnown.withLock { $0 = (bytes, value) }
        }

        /// ``remember(_:encoding:)`` of bytes that are copied only when they are kept.
        func remember(_ bytes: UnsafeRawBufferPointer, encoding value: Value) {
            guard lastKnown != nil, bytes.count <= Self.rememberedLimit else { return }
            remember(Array(bytes), encoding: value)
        }

        override func declaredForm() throws -> DeclaredForm {
            let encoded: [UInt8]
            do {
                encoded = try codec.encode(defaultValue)
            } catch {
                throw PersistentDefaultsError.encodingFailed(
                    key: name, type: "\(Value.self)", reason: "the default: \(error.description)")
            }
            return DeclaredForm(
                type: codec.storedTag, bitWidth: codec.storedBitWidth, isOptional: codec.isOptional,
                encodedDefault: encoded)
        }

        /// Creates a key for any `Codable` value.
        public convenience init(_ name: String, default defaultValue: Value) where Value: Codable {
            self.init(name: name, defaultValue: defaultValue, codec: .automatic())
        }

        /// Creates a key for an optional value whose default is nil.
        public convenience init<Wrapped: Codable>(_ name: String) where Value == Wrapped? {
            self.init(name: name, defaultValue: nil, codec: .automatic())
        }

        /// Creates a key whose values are stored through a ``ValueConversion``.
        ///
        /// ```swift
        /// let legacy = PersistentDefaults.Key<Bool>("legacy", default: false, conversion: IntBoolConversion.self)
        /// ```
        ///
        /// `SendableMetatype`: the key is `Sendable` and converts on whichever thread reads,
        /// writes or delivers a change, so the conversion must not be an actor-isolated
        /// conformance (`extension C: @MainActor ValueConversion`), whose functions would run off
        /// their actor.
        public convenience init<Conversion: ValueConversion & SendableMetatype>(
            _ name: String, default defaultValue: Value, conversion: Conversion.Type
        ) where Conversion.Value == Value, Conversion.Stored: Codable {
            self.init(name: name, defaultValue: defaultValue, codec: .converting(through: conversion))
        }
    }
}

extension ValueCodec {
    /// A codec that stores `Value` as `Conversion.Stored`.
    static func converting<Conversion: ValueConversion>(through _: Conversion.Type) -> ValueCodec<Value>
    where Conversion.Value == Value, Conversion.Stored: Codable {
        ValueCodec<Conversion.Stored>.automatic().converted(
            encode: { try Conversion.encode(value: $0) }, decode: { try Conversion.decode(data: $0) })
    }
}

/// `==` of `Value` when it is `Equatable` (found at run time, as `Key` does not require it);
/// nil otherwise.
func equality<Value>(of _: Value.Type) -> ((Value, Value) -> Bool)? {
    guard let equatable = Value.self as? any Equatable.Type else { return nil }
    func compare<E: Equatable>(as _: E.Type) -> (Value, Value) -> Bool {
        { lhs, rhs in
            guard let lhs = lhs as? E, let rhs = rhs as? E else { return false }
            return lhs == rhs
        }
    }
    return compare(as: equatable)
}

#if !compiler(>=6.2)
    /// Stands in for the standard library's `SendableMetatype` (Swift 6.2) on older compilers,
    /// which cannot tell isolated conformances apart: every type meets it.
    public typealias SendableMetatype = Any
#endif

/// Whether no value of `type` can hold a class instance, found from the type alone: its stored
/// fields, through structs, tuples, optionals, arrays, sets and dictionaries, are all of types
/// without references (`_isPOD`) or of the standard library's and Foundation's value types whose
/// storage is a class (`String`, `Data`, `URL`, …). Conservative: a class, an existential, a
/// closure, an enum with a payload that holds references (its payloads are not listed) or a
/// collection type not named here counts as holding instances. Worked out once per type.
func holdsOnlyValues(_ type: Any.Type) -> Bool {
    let id = ObjectIdentifier(type)
    if let known = valueOnlyTypes.withLock({ $0[id] }) { return known }
    // The walk runs no user code (it reads type metadata), but it is not run under the lock.
    var visiting: Set<ObjectIdentifier> = []
    let verdict = kindOf(type).map { holdsOnlyValues(type, kind: $0, visiting: &visiting) } ?? false
    valueOnlyTypes.withLock { $0[id] = verdict }
    return verdict
}

/// ``holdsOnlyValues(_:)`` of each type asked about.
private let valueOnlyTypes = Locked<[ObjectIdentifier: Bool]>([:])

/// The value types of the standard library and Foundation that keep their storage in a class
/// they never share for writing (copy on write or immutable storage).
private let valueTypesWithStorage: Set<ObjectIdentifier> = [
    ObjectIdentifier(String.self), ObjectIdentifier(Substring.self), ObjectIdentifier(Character.self),
    ObjectIdentifier(Data.self), ObjectIdentifier(URL.self), ObjectIdentifier(Locale.self),
    ObjectIdentifier(TimeZone.self), ObjectIdentifier(Calendar.self),
]

/// `holdsOnlyValues` of a type of the metadata kind `kind`; `visiting` holds the structs being
/// walked, so that a recursive type (a struct with an array of itself) ends: the walk is a
/// conjunction, so assuming the type holds only values there decides nothing by itself.
private func holdsOnlyValues(_ type: Any.Type, kind: _MetadataKind, visiting: inout Set<ObjectIdentifier>) -> Bool {
    if isTrivial(type) || valueTypesWithStorage.contains(ObjectIdentifier(type)) { return true }
    if let container = type as? any ValueContainer.Type {
        return container.elementTypes.allSatisfy { element in
            kindOf(element).map { holdsOnlyValues(element, kind: $0, visiting: &visiting) } ?? false
        }
    }
    // `_forEachField` only for the kinds it lists fields of without a value (it dereferences
    // one for an existential); an enum's payloads are not fields.
    guard kind == .struct || kind == .tuple else { return false }
    guard visiting.insert(ObjectIdentifier(type)).inserted else { return true }
    var fields: [(type: Any.Type, kind: _MetadataKind)] = []
    let listed = _forEachField(of: type, options: []) { _, _, field, kind in
        fields.append((field, kind))
        return true
    }
    return listed && fields.allSatisfy { holdsOnlyValues($0.type, kind: $0.kind, visiting: &visiting) }
}

/// Whether `T`'s values hold no reference at all (the runtime's "plain old data").
private func isTrivial<T>(_: T.Type) -> Bool { _isPOD(T.self) }

/// The metadata kind of `T` (struct, enum, class, existential, …), as the kind of the one field
/// of a `Field<T>`; nil if the runtime lists none.
private func kindOf<T>(_: T.Type) -> _MetadataKind? {
    var kind: _MetadataKind?
    _ = _forEachField(of: Field<T>.self, options: []) { _, _, _, fieldKind in
        kind = fieldKind
        return false
    }
    return kind
}

/// A struct with one field of type `T`, through which ``kindOf(_:)`` learns `T`'s kind.
private struct Field<T> {
    var value: T
}

/// A standard library container, for ``holdsOnlyValues(_:)`` to look inside: its elements are
/// held by value in storage that copies on write.
private protocol ValueContainer {
    static var elementTypes: [Any.Type] { get }
}

extension Optional: ValueContainer {
    fileprivate static var elementTypes: [Any.Type] { [Wrapped.self] }
}

extension Array: ValueContainer {
    fileprivate static var elementTypes: [Any.Type] { [Element.self] }
}

extension ContiguousArray: ValueContainer {
    fileprivate static var elementTypes: [Any.Type] { [Element.self] }
}

extension ArraySlice: ValueContainer {
    fileprivate static var elementTypes: [Any.Type] { [Element.self] }
}

extension Set: ValueContainer {
    fileprivate static var elementTypes: [Any.Type] { [Element.self] }
}

extension Dictionary: ValueContainer {
    fileprivate static var elementTypes: [Any.Type] { [Key.self, Value.self] }
}
