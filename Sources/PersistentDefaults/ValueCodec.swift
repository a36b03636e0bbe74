import Foundation

/// Turns values of one Swift type into stored bytes and back.
///
/// A codec is chosen once, when a key is made, by the value's type: the primitive types get
/// their own tag, RawRepresentable types are stored as their raw value, optionals as their
/// wrapped value or `null`, and every other Codable type as JSON.
///
/// `@unchecked Sendable`: the closures capture only metatypes, conversion functions and other
/// codecs, all immutable; they keep no state between calls.
@usableFromInline
struct ValueCodec<Value>: @unchecked Sendable {
    /// Encodes a value to tag and payload.
    let encode: (Value) throws(StoredValueError) -> [UInt8]
    /// Appends what `encode` returns to a buffer, for the codecs that can do so without an
    /// array of their own (the fixed-width primitive types); nil for the others.
    var encodeAppending: ((Value, inout ByteBuffer) throws(StoredValueError) -> Void)?
    /// Decodes tag and payload; called from the `@inlinable` typed reads.
    @usableFromInline let decode: (UnsafeRawBufferPointer) throws(StoredValueError) -> Value
    /// The tag a non-nil value is stored with: what a declaration records as the key's type.
    let storedTag: StoredValue.Tag
    /// The bit width of the type whose reading decides what decodes, when it is narrower than the
    /// tag's 64 bits (`Int8` … `UInt32`, `Float`); nil otherwise. A declaration records it, so
    /// that tools refuse a value of the right tag that the type cannot hold.
    var storedBitWidth: Int? = nil
    /// Whether the type is optional, so that an explicit `null` (tag `0x00`) decodes.
    var isOptional = false
    /// Whether decoding runs the user's code — a type's `init(from:)` or `init(rawValue:)`, a
    /// key type's conversion — which may use the store itself, so it must run with nothing of
    /// the store held. False only for the primitive types, decoded by the library alone.
    var runsUserCode = true

    /// Decodes copied bytes.
    func decode(_ bytes: [UInt8]) throws(StoredValueError) -> Value {
        try bytes.withUnsafeBytes { buffer in Result { () throws(StoredValueError) in try decode(buffer) } }.get()
    }

    /// Stores `Value` through `Stored`'s codec with a conversion in each direction.
    func converted<Converted>(
        encode toStored: @escaping (Converted) throws -> Value,
        decode fromStored: @escaping (Value) throws -> Converted
    ) -> ValueCodec<Converted> {
        ValueCodec<Converted>(
            encode: { (value) throws(StoredValueError) in
                do { return try self.encode(try toStored(value)) } catch let error as StoredValueError {
                    throw error
                } catch { throw StoredValueError("conversion failed: \(error)") }
            },
            decode: { (bytes) throws(StoredValueError) in
                let stored = try self.decode(bytes)
                do { return try fromStored(stored) } catch let error as StoredValueError {
                    throw error
                } catch { throw StoredValueError("conversion failed: \(error)") }
            }, storedTag: storedTag, storedBitWidth: storedBitWidth, isOptional: isOptional, runsUserCode: true)
    }
}

extension ValueCodec where Value: Codable {
    /// The codec for `Value`, chosen by its type.
    static func automatic() -> ValueCodec<Value> {
        if let primitive = Value.self as? any PrimitiveStorable.Type, let codec = primitiveCodec(primitive) {
            return codec
        }
        if let optional = Value.self as? any OptionalProtocol.Type, let codec = optionalCodec(optional) {
            return codec
        }
        if let raw = Value.self as? any RawRepresentable.Type, let codec = rawCodec(raw) {
            return codec
        }
        return json()
    }

    /// The JSON codec: sorted keys, so equal values give equal bytes.
    static func json() -> ValueCodec<Value> {
        ValueCodec(
            encode: { (value) throws(StoredValueError) in
                do {
                    return [StoredValue.Tag.json.rawValue] + (try JSONCoding.encoder.encode(value))
                } catch {
                    throw StoredValueError("JSON encoding failed: \(error)")
                }
            },
            decode: { (bytes) throws(StoredValueError) in
                let json: Data
                if bytes.first == StoredValue.Tag.json.rawValue {
                    // One copy of the payload; `Data(bytes[1...])` (a slice) made the decode
                    // 12–17 % slower than raw LMDB's for the same JSON (now 1.04–1.05×, alternated).
                    json = Data(bytes: bytes.baseAddress! + 1, count: bytes.count - 1)
                } else {
                    // A primitive written by another tool decodes as its JSON equivalent.
                    json = Data(try StoredValue(encodedValue: bytes).codableJSONText.utf8)
                }
                do {
                    return try JSONCoding.decoder.decode(Value.self, from: json)
                } catch {
                    let tag = StoredValue.Tag(rawValue: bytes[0]).map { "\($0)" } ?? "?"
                    throw StoredValueError("stored \(tag) does not decode as \(Value.self): \(Self.reason(error))")
                }
            }, storedTag: .json)
    }

    private static func reason(_ error: any Error) -> String {
        switch error {
        case DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context),
            DecodingError.keyNotFound(_, let context), DecodingError.dataCorrupted(let context):
            let path = context.codingPath.map(\.stringValue).joined(separator: ".")
            return path.isEmpty ? context.debugDescription : "\(path): \(context.debugDescription)"
        default:
            return "\(error)"
        }
    }
}

extension ValueCodec {
    private static func primitiveCodec<P: PrimitiveStorable>(_: P.Type) -> ValueCodec<Value>? {
        ValueCodec<P>.primitive() as? ValueCodec<Value>
    }

    private static func optionalCodec<O: OptionalProtocol>(_: O.Type) -> ValueCodec<Value>? {
        guard let wrapped = O.Wrapped.self as? any Codable.Type else { return nil }
        return wrappedCodec(wrapped, in: O.self)
    }

    private static func wrappedCodec<W: Codable, O: OptionalProtocol>(_: W.Type, in _: O.Type) -> ValueCodec<Value>? {
        let base = ValueCodec<W>.automatic()
        let codec = ValueCodec<W?>(
            encode: { (value) throws(StoredValueError) in
                guard let value else { return [StoredValue.Tag.null.rawValue] }
                return try base.encode(value)
            },
            decode: { (bytes) throws(StoredValueError) in
                if bytes.count == 1, bytes[0] == StoredValue.Tag.null.rawValue { return nil }
                return try base.decode(bytes)
            }, storedTag: base.storedTag, storedBitWidth: base.storedBitWidth, isOptional: true,
            runsUserCode: base.runsUserCode)
        return codec as? ValueCodec<Value>
    }

    private static func rawCodec<R: RawRepresentable>(_: R.Type) -> ValueCodec<Value>? {
        guard let primitive = R.RawValue.self as? any PrimitiveStorable.Type else { return nil }
        return rawCodec(R.self, primitive)
    }

    private static func rawCodec<R: RawRepresentable, P: PrimitiveStorable>(_: R.Type, _: P.Type) -> ValueCodec<Value>?
    {
        guard let base = ValueCodec<P>.primitive() as? ValueCodec<R.RawValue> else { return nil }
        let codec = ValueCodec<R>(
            encode: { (value) throws(StoredValueError) in try base.encode(value.rawValue) },
            decode: { (bytes) throws(StoredValueError) in
                let raw = try base.decode(bytes)
                guard let value = R(rawValue: raw) else {
                    throw StoredValueError("\(raw) is not a raw value of \(R.self)")
                }
                return value
            }, storedTag: base.storedTag, storedBitWidth: base.storedBitWidth)
        return codec as? ValueCodec<Value>
    }
}

extension ValueCodec where Value: PrimitiveStorable {
    /// The codec of a type with its own tag.
    ///
    /// Keys are made with the value type opened from an existential (`automatic()`), so a codec
    /// built here would run unspecialised: every decode would look up generic metadata (about a
    /// sixth of a scattered get, measured with `perf`). The codecs of the fixed-size types are
    /// therefore built once in concrete context (``primitiveCodecs``), where the compiler
    /// specialises their closures.
    static func primitive() -> ValueCodec<Value> {
        if let built = primitiveCodecs[ObjectIdentifier(Value.self)] as? ValueCodec<Value> { return built }
        return makeCodec()
    }

    /// The codec built for `Value`; specialised when `Value` is a concrete type at the call.
    static func makeCodec() -> ValueCodec<Value> {
        ValueCodec(
            encode: { (value) throws(StoredValueError) in try value.storedValue().encodedValue },
            // Only for the fixed-width tags: a string or data value may be large, and a large
            // value keeps its own array in a transaction (see `WriteTransaction`).
            encodeAppending: fixedWidthTags.contains(Value.storedTag)
                ? { (value, buffer) throws(StoredValueError) in try value.storedValue().append(to: &buffer) } : nil,
            decode: { (bytes) throws(StoredValueError) in try Value.decode(bytes) },
            storedTag: Value.storedTag, storedBitWidth: Value.storedBitWidth, runsUserCode: false)
    }
}

/// The tags of values of at most 9 bytes.
private let fixedWidthTags: Set<StoredValue.Tag> = [.bool, .int, .uint, .double, .date]

/// The codecs of the fixed-size primitive types, each built where its type is concrete.
private let primitiveCodecs: [ObjectIdentifier: any Sendable] = {
    func entry<P: PrimitiveStorable>(_ codec: ValueCodec<P>) -> (ObjectIdentifier, any Sendable) {
        (ObjectIdentifier(P.self), codec)
    }
    return Dictionary(
        uniqueKeysWithValues: [
            entry(ValueCodec<Int>.makeCodec()), entry(ValueCodec<Int8>.makeCodec()),
            entry(ValueCodec<Int16>.makeCodec()), entry(ValueCodec<Int32>.makeCodec()),
            entry(ValueCodec<Int64>.makeCodec()), entry(ValueCodec<UInt>.makeCodec()),
            entry(ValueCodec<UInt8>.makeCodec()), entry(ValueCodec<UInt16>.makeCodec()),
            entry(ValueCodec<UInt32>.makeCodec()), entry(ValueCodec<UInt64>.makeCodec()),
            entry(ValueCodec<Double>.makeCodec()), entry(ValueCodec<Float>.makeCodec()),
            entry(ValueCodec<Bool>.makeCodec()),
        ])
}()

/// A fixed-width value read straight from its own tag and payload, for the `@inlinable` typed
/// reads: when `Value` is concrete at the caller, the type tests fold away and the read decodes
/// without calling the key's codec (whose closure context all keys of a type share, so calling
/// it from several threads makes them contend on its reference count). nil sends the caller
/// through the codec (other types, other tags, conversions, errors).
@inlinable @inline(__always)
func decodeFixedWidth<Value>(_ bytes: UnsafeRawBufferPointer, as _: Value.Type) -> Value? {
    if Value.self == Int.self { return fixedInteger(bytes, as: Int.self) as! Value? }
    if Value.self == Int64.self { return fixedInteger(bytes, as: Int64.self) as! Value? }
    if Value.self == Int32.self { return fixedInteger(bytes, as: Int32.self) as! Value? }
    if Value.self == UInt64.self { return fixedInteger(bytes, as: UInt64.self) as! Value? }
    if Value.self == UInt.self { return fixedInteger(bytes, as: UInt.self) as! Value? }
    if Value.self == Double.self { return fixedDouble(bytes) as! Value? }
    if Value.self == Bool.self { return fixedBool(bytes) as! Value? }
    return nil
}

/// Appends the stored form of an `Int`, `Int64`, `UInt64` or `Double` value — the bytes its own
/// codec's `encodeAppending` appends — and returns true; false for any other type (the caller
/// encodes through the key's codec). For a write transaction's `set`, which runs unspecialised:
/// the type tests compare metadata, and the codec's closure and the `StoredValue` it builds
/// cost ~70 instructions more a key of a 1,000-key transaction (callgrind). Only for a key whose
/// codec is its type's own (`Key.encodesFixedWidth`): a conversion must still convert.
@inline(__always)
func appendFixedWidth<Value>(_ value: Value, to buffer: inout ByteBuffer) -> Bool {
    if Value.self == Int.self {
        let payload = UInt64(bitPattern: Int64(unsafeBitCast(value, to: Int.self)))
        buffer.append(tag: StoredValue.Tag.int.rawValue, payload: payload)
    } else if Value.self == Int64.self {
        let payload = UInt64(bitPattern: unsafeBitCast(value, to: Int64.self))
        buffer.append(tag: StoredValue.Tag.int.rawValue, payload: payload)
    } else if Value.self == UInt64.self {
        buffer.append(tag: StoredValue.Tag.uint.rawValue, payload: unsafeBitCast(value, to: UInt64.self))
    } else if Value.self == Double.self {
        let payload = unsafeBitCast(value, to: Double.self).bitPattern
        buffer.append(tag: StoredValue.Tag.double.rawValue, payload: payload)
    } else {
        return false
    }
    return true
}

/// An integer stored under the `int` or `uint` tag, when it fits `Integer`.
@inlinable @inline(__always)
func fixedInteger<Integer: FixedWidthInteger>(_ bytes: UnsafeRawBufferPointer, as _: Integer.Type = Integer.self)
    -> Integer?
{
    if let bits = payload64(bytes, tag: .int) { return Integer(exactly: Int64(bitPattern: bits)) }
    if let bits = payload64(bytes, tag: .uint) { return Integer(exactly: bits) }
    return nil
}

/// A double stored under the `double` tag.
@inlinable @inline(__always)
func fixedDouble(_ bytes: UnsafeRawBufferPointer) -> Double? {
    payload64(bytes, tag: .double).map { Double(bitPattern: $0) }
}

/// A Boolean stored under the `bool` tag.
@inlinable @inline(__always)
func fixedBool(_ bytes: UnsafeRawBufferPointer) -> Bool? {
    guard bytes.count == 2, bytes[0] == StoredValue.Tag.bool.rawValue, bytes[1] <= 1 else { return nil }
    return bytes[1] == 1
}

/// The JSON coders, made once: `JSONEncoder` and `JSONDecoder` are Sendable and keep no state
/// between calls.
enum JSONCoding {
    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()
    static let decoder = JSONDecoder()
}

/// `Optional`, seen through a protocol so that its wrapped type can be reached at run time.
protocol OptionalProtocol {
    associatedtype Wrapped
}

extension Optional: OptionalProtocol {}

/// A type with its own tag in the on-disk format.
protocol PrimitiveStorable {
    /// The tag values of this type are stored with.
    static var storedTag: StoredValue.Tag { get }
    /// The type's bit width when it holds less than its tag's 64 bits (`Int8`: 8, `Float`: 32),
    /// so that a stored value of the tag may not fit it; nil when every value of the tag that
    /// converts without loss does.
    static var storedBitWidth: Int? { get }
    /// The value to store.
    func storedValue() throws(StoredValueError) -> StoredValue
    /// Reads a stored value, converting between numeric tags when no information is lost.
    init(stored: StoredValue) throws(StoredValueError)
    /// See the extension: a fast path for the type's own tag.
    static func decodeDirectly(_ bytes: UnsafeRawBufferPointer) -> Self?
}

/// The 8-byte big-endian payload after the tag, when `bytes` are `tag` and 8 bytes.
@inlinable @inline(__always)
func payload64(_ bytes: UnsafeRawBufferPointer, tag: StoredValue.Tag) -> UInt64? {
    guard bytes.count == 9, bytes[0] == tag.rawValue else { return nil }
    return UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: 1, as: UInt64.self))
}

extension PrimitiveStorable {
    /// Reads tag and payload; fixed-width types read their own tag without building a `StoredValue`.
    @inline(__always)
    static func decode(_ bytes: UnsafeRawBufferPointer) throws(StoredValueError) -> Self {
        if let direct = decodeDirectly(bytes) { return direct }
        return try Self(stored: try StoredValue(encodedValue: bytes))
    }

    /// The value when `bytes` are this type's own tag and payload and the value fits; nil sends
    /// the caller through `StoredValue` (conversions, errors).
    static func decodeDirectly(_ bytes: UnsafeRawBufferPointer) -> Self? { nil }

    /// The full width of the tag: no narrower type.
    static var storedBitWidth: Int? { nil }

    static func mismatch(_ stored: StoredValue) -> StoredValueError {
        StoredValueError("stored \(stored.tag) \(stored.jsonText.prefix(60)) is not a \(Self.self)")
    }
}

extension Bool: PrimitiveStorable {
    static var storedTag: StoredValue.Tag { .bool }
    func storedValue() -> StoredValue { .bool(self) }
    static func decodeDirectly(_ bytes: UnsafeRawBufferPointer) -> Bool? { fixedBool(bytes) }
    init(stored: StoredValue) throws(StoredValueError) {
        guard case .bool(let value) = stored else { throw Self.mismatch(stored) }
        self = value
    }
}

/// Integers share one conversion from the integer tags (and integral doubles).
protocol IntegerStorable: PrimitiveStorable, FixedWidthInteger {}

extension IntegerStorable {
    static var storedTag: StoredValue.Tag { isSigned ? .int : .uint }
    /// 8, 16 or 32 for the narrower integers; nil for 64 bits (`Int`, `UInt` on a 64-bit platform).
    static var storedBitWidth: Int? { bitWidth < 64 ? bitWidth : nil }

    init(stored: StoredValue) throws(StoredValueError) {
        let converted: Self? =
            switch stored {
            case .int(let value): Self(exactly: value)
            case .uint(let value): Self(exactly: value)
            case .double(let value): Self(exactly: value)
            default: nil
            }
        guard let converted else { throw Self.mismatch(stored) }
        self = converted
    }

    func storedValue() -> StoredValue {
        Self.isSigned ? .int(Int64(self)) : .uint(UInt64(self))
    }

    @inline(__always)
    static func decodeDirectly(_ bytes: UnsafeRawBufferPointer) -> Self? { fixedInteger(bytes) }
}

extension Int: IntegerStorable {}
extension Int8: IntegerStorable {}
extension Int16: IntegerStorable {}
extension Int32: IntegerStorable {}
extension Int64: IntegerStorable {}
extension UInt: IntegerStorable {}
extension UInt8: IntegerStorable {}
extension UInt16: IntegerStorable {}
extension UInt32: IntegerStorable {}
extension UInt64: IntegerStorable {}

/// Floating-point types share one conversion from the numeric tags.
protocol FloatingStorable: PrimitiveStorable, BinaryFloatingPoint {}

extension FloatingStorable {
    static var storedTag: StoredValue.Tag { .double }
    /// 32 for `Float`; nil for `Double`, which holds every stored double.
    static var storedBitWidth: Int? { MemoryLayout<Self>.size < 8 ? MemoryLayout<Self>.size * 8 : nil }

    init(stored: StoredValue) throws(StoredValueError) {
        // An integer converts only when the type holds it exactly, as integers do from doubles:
        // 2^53 + 1 is no Double, and `Self(value)` would read it as 2^53.
        let converted: Self? =
            switch stored {
            case .double(let value): Self.holding(value)
            case .int(let value): Self(exactly: value)
            case .uint(let value): Self(exactly: value)
            default: nil
            }
        guard let converted else { throw Self.mismatch(stored) }
        self = converted
    }

    func storedValue() -> StoredValue { .double(Double(self)) }

    @inline(__always)
    static func decodeDirectly(_ bytes: UnsafeRawBufferPointer) -> Self? { fixedDouble(bytes).flatMap(holding) }

    /// `value` rounded to this type; nil when the rounding loses the value itself: a finite
    /// Double beyond a `Float`'s range becomes infinite, a non-zero one below it zero (a Double
    /// key changed to a `Float` read 1e300 as `inf`, unreported).
    @inline(__always)
    static func holding(_ value: Double) -> Self? {
        let converted = Self(value)
        if converted.isInfinite, value.isFinite { return nil }
        if converted == 0, value != 0 { return nil }
        return converted
    }
}

extension Double: FloatingStorable {}
extension Float: FloatingStorable {}

extension String: PrimitiveStorable {
    static var storedTag: StoredValue.Tag { .string }
    func storedValue() -> StoredValue { .string(self) }
    init(stored: StoredValue) throws(StoredValueError) {
        guard case .string(let value) = stored else { throw Self.mismatch(stored) }
        self = value
    }
}

extension Data: PrimitiveStorable {
    static var storedTag: StoredValue.Tag { .data }
    func storedValue() -> StoredValue { .data(self) }
    init(stored: StoredValue) throws(StoredValueError) {
        guard case .data(let value) = stored else { throw Self.mismatch(stored) }
        self = value
    }
}

extension Date: PrimitiveStorable {
    static var storedTag: StoredValue.Tag { .date }
    func storedValue() -> StoredValue { .date(self) }
    init(stored: StoredValue) throws(StoredValueError) {
        switch stored {
        case .date(let value): self = value
        case .double(let value): self = Date(timeIntervalSince1970: value)
        default: throw Self.mismatch(stored)
        }
    }
}

extension URL: PrimitiveStorable {
    static var storedTag: StoredValue.Tag { .url }
    func storedValue() -> StoredValue { .url(self) }
    init(stored: StoredValue) throws(StoredValueError) {
        switch stored {
        case .url(let value): self = value
        case .string(let value):
            guard let url = URL(string: value) else { throw Self.mismatch(stored) }
            self = url
        default: throw Self.mismatch(stored)
        }
    }
}

extension UUID: PrimitiveStorable {
    static var storedTag: StoredValue.Tag { .uuid }
    func storedValue() -> StoredValue { .uuid(self) }
    init(stored: StoredValue) throws(StoredValueError) {
        switch stored {
        case .uuid(let value): self = value
        case .string(let value):
            guard let uuid = UUID(uuidString: value) else { throw Self.mismatch(stored) }
            self = uuid
        default: throw Self.mismatch(stored)
        }
    }
}
