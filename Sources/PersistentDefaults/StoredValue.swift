import Foundation

/// A stored value as it sits on disk: a one-byte type tag followed by its payload.
///
/// Every value PersistentDefaults writes is one of these, so a tool can print any stored value
/// without knowing the Swift type that wrote it:
///
/// ```swift
/// let raw = try store.storedValue(named: "launchCount")   // .int(3)
/// ```
///
/// The byte layout is documented in the DocC article <doc:OnDiskFormat>.
public enum StoredValue: Sendable, Hashable, CustomStringConvertible {
    /// An explicit nil, written for an optional key whose default is not nil. Tag `0x00`.
    case null
    /// Tag `0x01`, payload one byte 0 or 1.
    case bool(Bool)
    /// Any signed integer. Tag `0x02`, payload 8 bytes big-endian two's complement.
    case int(Int64)
    /// An unsigned integer. Tag `0x03`, payload 8 bytes big-endian.
    case uint(UInt64)
    /// A `Double` or `Float`. Tag `0x04`, payload the IEEE 754 bits, 8 bytes big-endian.
    case double(Double)
    /// Tag `0x05`, payload UTF-8.
    case string(String)
    /// Tag `0x06`, payload the bytes.
    case data(Data)
    /// Tag `0x0B`, payload `timeIntervalSinceReferenceDate` (seconds since 2001-01-01 UTC) as a
    /// big-endian IEEE 754 double, so every `Date` reads back equal. Tag `0x07` (seconds since
    /// 1970, written by earlier versions) is still read.
    case date(Date)
    /// Tag `0x08`, payload the URL's absolute string in UTF-8.
    case url(URL)
    /// Tag `0x09`, payload the 16 bytes.
    case uuid(UUID)
    /// A Codable value, array or dictionary. Tag `0x0A`, payload UTF-8 JSON (sorted keys).
    case json(String)

    /// The tag byte of each case.
    public enum Tag: UInt8, Sendable, CaseIterable, CustomStringConvertible {
        /// `null`
        case null = 0x00
        /// `bool`
        case bool = 0x01
        /// `int`
        case int = 0x02
        /// `uint`
        case uint = 0x03
        /// `double`
        case double = 0x04
        /// `string`
        case string = 0x05
        /// `data`
        case data = 0x06
        /// `date`: seconds since 2001. (Tag `0x07`, seconds since 1970, is read but not written.)
        case date = 0x0B
        /// `url`
        case url = 0x08
        /// `uuid`
        case uuid = 0x09
        /// `json`
        case json = 0x0A

        /// The tag's name as the format documentation and `pdinspect` print it.
        public var description: String {
            switch self {
            case .null: "null"
            case .bool: "bool"
            case .int: "int"
            case .uint: "uint"
            case .double: "double"
            case .string: "string"
            case .data: "data"
            case .date: "date"
            case .url: "url"
            case .uuid: "uuid"
            case .json: "json"
            }
        }
    }

    /// The tag of this value.
    public var tag: Tag {
        switch self {
        case .null: .null
        case .bool: .bool
        case .int: .int
        case .uint: .uint
        case .double: .double
        case .string: .string
        case .data: .data
        case .date: .date
        case .url: .url
        case .uuid: .uuid
        case .json: .json
        }
    }

    /// The tag of dates written before tag `0x0B`: payload seconds since 1970-01-01 UTC as a
    /// big-endian IEEE 754 double. Converting a `Date` (seconds since 2001) to it rounds away the
    /// lowest bits, so it is only read, as a ``date(_:)``.
    static let legacyDateTag: UInt8 = 0x07

    /// Decodes an encoded value: the on-disk bytes, type tag then payload.
    ///
    /// ```swift
    /// let value = try StoredValue(encodedValue: [0x02, 0, 0, 0, 0, 0, 0, 0x01, 0x2C])  // .int(300)
    /// ```
    public init(encodedValue bytes: UnsafeRawBufferPointer) throws(StoredValueError) {
        guard let first = bytes.first else { throw StoredValueError("empty value") }
        if first == Self.legacyDateTag {
            guard bytes.count == 9 else {
                throw StoredValueError("date payload has \(bytes.count - 1) bytes, expected 8")
            }
            let bits = UInt64(bigEndianBytes: bytes[1...])
            self = .date(Date(timeIntervalSince1970: Double(bitPattern: bits)))
            return
        }
        guard let tag = Tag(rawValue: first) else {
            throw StoredValueError("unknown type tag 0x\(String(first, radix: 16))")
        }
        let payload = UnsafeRawBufferPointer(rebasing: bytes[1...])
        func fixed(_ count: Int) throws(StoredValueError) -> UInt64 {
            guard payload.count == count else {
                throw StoredValueError("\(tag) payload has \(payload.count) bytes, expected \(count)")
            }
            return UInt64(bigEndianBytes: payload)
        }
        func text() throws(StoredValueError) -> String {
            guard let string = String(validating: payload, as: UTF8.self) else {
                throw StoredValueError("\(tag) payload is not valid UTF-8")
            }
            return string
        }
        switch tag {
        case .null:
            _ = try fixed(0)
            self = .null
        case .bool:
            let byte = try fixed(1)
            guard byte <= 1 else { throw StoredValueError("bool payload is \(byte), expected 0 or 1") }
            self = .bool(byte == 1)
        case .int: self = .int(Int64(bitPattern: try fixed(8)))
        case .uint: self = .uint(try fixed(8))
        case .double: self = .double(Double(bitPattern: try fixed(8)))
        case .string: self = .string(try text())
        case .data: self = .data(Data(payload))
        case .date: self = .date(Date(timeIntervalSinceReferenceDate: Double(bitPattern: try fixed(8))))
        case .url:
            let string = try text()
            guard let url = URL(string: string) else { throw StoredValueError("url payload is not a URL") }
            self = .url(url)
        case .uuid:
            _ = try fixed(16)
            var uuid = UUID().uuid
            withUnsafeMutableBytes(of: &uuid) { $0.copyMemory(from: payload) }
            self = .uuid(UUID(uuid: uuid))
        case .json: self = .json(try text())
        }
    }

    /// Decodes an encoded value: the on-disk bytes, type tag then payload.
    public init(encodedValue bytes: [UInt8]) throws(StoredValueError) {
        let decoded = bytes.withUnsafeBytes { buffer in
            Result { () throws(StoredValueError) in try StoredValue(encodedValue: buffer) }
        }
        self = try decoded.get()
    }

    /// Decodes the on-disk bytes (tag and payload).
    @available(*, deprecated, renamed: "init(encodedValue:)")
    public init(bytes: UnsafeRawBufferPointer) throws(StoredValueError) { try self.init(encodedValue: bytes) }

    /// Decodes the on-disk bytes (tag and payload).
    @available(*, deprecated, renamed: "init(encodedValue:)")
    public init(bytes: [UInt8]) throws(StoredValueError) { try self.init(encodedValue: bytes) }

    /// The on-disk bytes: tag then payload.
    @available(*, deprecated, renamed: "encodedValue")
    public var bytes: [UInt8] { encodedValue }

    /// The encoded value: the on-disk bytes, type tag then payload, as ``StoredEntry/encodedValue``
    /// and ``CommitRecord/Change/encodedValue`` hold them.
    ///
    /// ```swift
    /// StoredValue.int(300).encodedValue   // [0x02, 0, 0, 0, 0, 0, 0, 0x01, 0x2C]
    /// ```
    public var encodedValue: [UInt8] {
        // One allocation of the final size: the tag, then the payload.
        func tagged(_ payload: some Collection<UInt8>) -> [UInt8] {
            var out: [UInt8] = []
            out.reserveCapacity(1 + payload.count)
            out.append(tag.rawValue)
            out.append(contentsOf: payload)
            return out
        }
        switch self {
        case .null: return [tag.rawValue]
        case .bool(let value): return [tag.rawValue, value ? 1 : 0]
        case .int(let value): return Self.encoded(tag, UInt64(bitPattern: value))
        case .uint(let value): return Self.encoded(tag, value)
        case .double(let value): return Self.encoded(tag, value.bitPattern)
        case .date(let value): return Self.encoded(tag, value.timeIntervalSinceReferenceDate.bitPattern)
        case .string(let value), .json(let value): return tagged(value.utf8)
        case .data(let value): return tagged(value)
        case .url(let value): return tagged(value.absoluteString.utf8)
        case .uuid(let value): return withUnsafeBytes(of: value.uuid) { tagged($0) }
        }
    }

    /// Appends ``encodedValue`` to `buffer`, without an array of its own for the fixed-width
    /// values and booleans (a write transaction keeps its small values in one buffer).
    func append(to buffer: inout ByteBuffer) {
        switch self {
        case .int(let value): buffer.append(tag: tag.rawValue, payload: UInt64(bitPattern: value))
        case .uint(let value): buffer.append(tag: tag.rawValue, payload: value)
        case .double(let value): buffer.append(tag: tag.rawValue, payload: value.bitPattern)
        case .date(let value):
            buffer.append(tag: tag.rawValue, payload: value.timeIntervalSinceReferenceDate.bitPattern)
        case .bool(let value):
            buffer.append(tag.rawValue)
            buffer.append(value ? 1 : 0)
        default: buffer.append(contentsOf: encodedValue)
        }
    }

    /// The 9 bytes of a fixed-width value: `tag`, then `payload` big-endian, written at once
    /// (appending byte by byte checked the capacity nine times: about half of a typed `set`'s
    /// encoding, callgrind).
    private static func encoded(_ tag: Tag, _ payload: UInt64) -> [UInt8] {
        func byte(_ shift: UInt64) -> UInt8 { UInt8(truncatingIfNeeded: payload >> shift) }
        return [tag.rawValue, byte(56), byte(48), byte(40), byte(32), byte(24), byte(16), byte(8), byte(0)]
    }

    /// The value as a JSON text: JSON values as they are, others as the closest JSON value
    /// (data as base64, dates as seconds since 1970, URLs and UUIDs as strings).
    public var jsonText: String {
        switch self {
        case .null: "null"
        case .bool(let value): value ? "true" : "false"
        case .int(let value): String(value)
        case .uint(let value): String(value)
        case .double(let value): value.isFinite ? "\(value)" : "null"
        case .string(let value): Self.quoted(value)
        case .data(let value): Self.quoted(value.base64EncodedString())
        case .date(let value): "\(value.timeIntervalSince1970)"
        case .url(let value): Self.quoted(value.absoluteString)
        case .uuid(let value): Self.quoted(value.uuidString)
        case .json(let value): value
        }
    }

    /// The value as the JSON that `JSONEncoder` would have made of it inside a `json` value, for
    /// a JSON-coded key that reads a primitive another tool stored: ``jsonText``, except that a
    /// date is seconds since 2001, as `Date` is encoded inside JSON (seconds since 1970, as
    /// `jsonText` shows it, read 978,307,200 s late).
    var codableJSONText: String {
        guard case .date(let value) = self else { return jsonText }
        let seconds = value.timeIntervalSinceReferenceDate
        return seconds.isFinite ? "\(seconds)" : "null"
    }

    /// A readable form for people: strings unquoted, data as hex, dates in ISO 8601.
    ///
    /// A date outside ``calendarDates`` (or not a number) is shown as its seconds since 1970
    /// with a note instead, e.g. `1e+300 seconds since 1970 (not shown as a date: outside
    /// 1582-10-15…9999-12-31)`: Foundation's calendar would show a wrong date for it (1e300
    /// seconds as the year 506713, -1e300 and NaN as -4712-01-01, years before 1582 in the
    /// Julian calendar).
    public var description: String {
        switch self {
        case .string(let value): value
        case .data(let value): value.count <= 64 ? "<\(Self.hex(value))>" : "<\(value.count) bytes>"
        case .date(let value):
            Self.calendarDates.contains(value.timeIntervalSince1970)
                ? value.formatted(.iso8601) : Self.uncalendared(value)
        default: jsonText
        }
    }

    /// The dates, as seconds since 1970, that ``description`` shows in ISO 8601: from
    /// 1582-10-15T00:00:00Z, where Foundation's calendar turns from Julian to Gregorian (ISO
    /// 8601 counts Gregorian years), up to the end of 9999 (the last four-digit year).
    public static let calendarDates: Range<TimeInterval> = -12_219_292_800..<253_402_300_800

    /// How ``description`` shows a date outside ``calendarDates``: its seconds since 1970, with
    /// a note.
    public static func uncalendared(_ date: Date) -> String {
        "\(date.timeIntervalSince1970) seconds since 1970 (not shown as a date: outside 1582-10-15…9999-12-31)"
    }

    private static func hex(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef")
        return String(bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0xF)]] })
    }

    static func quoted(_ string: String) -> String {
        var out = "\""
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20: out += "\\u00" + hex([UInt8(scalar.value)])
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}

/// Why bytes did not decode as a `StoredValue` or as a key's type.
public struct StoredValueError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A one-line reason.
    public let description: String

    /// Creates an error with a reason.
    public init(_ description: String) { self.description = description }
}
