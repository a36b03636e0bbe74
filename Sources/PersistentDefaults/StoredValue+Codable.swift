import Foundation

/// A stored value as JSON that keeps its type: `{"type":"int","value":300}` — one value of a
/// `pdinspect export` file, and the form of a value in etcd for an ``EtcdMirror``.
///
/// ```swift
/// let value = try JSONDecoder().decode(StoredValue.self, from: Data(#"{"type":"int","value":300}"#.utf8))
/// // .int(300)
/// ```
///
/// `type` is a tag name (``StoredValue/Tag``); `value` is: data as base64, a date as seconds
/// since 1970 (in the decimal digits that give back the same date), a URL or UUID as a string,
/// a json value embedded as JSON, null as `null`. With `JSONEncoder`'s default strategy a
/// non-finite double does not encode; ``typedJSON`` writes the strings `inf`, `-inf` and `nan`,
/// and ``init(typedJSON:)`` reads them.
extension StoredValue: Codable {
    private enum CodingKeys: String, CodingKey {
        case type, value
    }

    /// Encodes the value in its typed JSON form.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(tag.description, forKey: .type)
        switch self {
        case .null: try container.encodeNil(forKey: .value)
        case .bool(let bool): try container.encode(bool, forKey: .value)
        case .int(let int): try container.encode(int, forKey: .value)
        case .uint(let uint): try container.encode(uint, forKey: .value)
        case .double(let double): try container.encode(double, forKey: .value)
        case .string(let string): try container.encode(string, forKey: .value)
        case .data(let data): try container.encode(data.base64EncodedString(), forKey: .value)
        case .date(let date):
            if let seconds = Self.exactSecondsSince1970(of: date) {
                try container.encode(seconds, forKey: .value)
            } else {
                try container.encode(date.timeIntervalSince1970, forKey: .value)
            }
        case .url(let url): try container.encode(url.absoluteString, forKey: .value)
        case .uuid(let uuid): try container.encode(uuid.uuidString, forKey: .value)
        case .json(let text):
            guard let json = JSONValue.parse(text) else {
                throw EncodingError.invalidValue(
                    text, .init(codingPath: container.codingPath, debugDescription: "the stored JSON does not parse"))
            }
            try container.encode(json, forKey: .value)
        }
    }

    /// Decodes a value from its typed JSON form.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let name = try container.decode(String.self, forKey: .type)
        guard let tag = Tag.allCases.first(where: { $0.description == name }) else {
            throw DecodingError.dataCorruptedError(
                forKey: .type, in: container,
                debugDescription:
                    "unknown type '\(name)' (one of \(Tag.allCases.map(\.description).joined(separator: ", ")))")
        }
        func text() throws -> String { try container.decode(String.self, forKey: .value) }
        func invalid(_ what: String) -> DecodingError {
            .dataCorruptedError(forKey: .value, in: container, debugDescription: "not \(what)")
        }
        switch tag {
        case .null:
            guard try container.decodeNil(forKey: .value) else { throw invalid("null") }
            self = .null
        case .bool: self = .bool(try container.decode(Bool.self, forKey: .value))
        case .int: self = .int(try container.decode(Int64.self, forKey: .value))
        case .uint: self = .uint(try container.decode(UInt64.self, forKey: .value))
        case .double: self = .double(try container.decode(Double.self, forKey: .value))
        case .string: self = .string(try text())
        case .data:
            guard let data = Data(base64Encoded: try text()) else { throw invalid("base64 data") }
            self = .data(data)
        case .date:
            if let seconds = try? container.decode(Decimal.self, forKey: .value),
                let date = Self.date(secondsSince1970: seconds)
            {
                self = .date(date)
            } else {
                self = .date(Date(timeIntervalSince1970: try container.decode(Double.self, forKey: .value)))
            }
        case .url:
            guard let url = URL(string: try text()) else { throw invalid("a URL") }
            self = .url(url)
        case .uuid:
            guard let uuid = UUID(uuidString: try text()) else { throw invalid("a UUID") }
            self = .uuid(uuid)
        case .json: self = .json(try container.decode(JSONValue.self, forKey: .value).text)
        }
    }

    /// Seconds from 1970 to 2001, as `Date` counts them.
    private static let secondsFrom1970To2001 = Decimal(978_307_200)

    /// The seconds since 1970 of `date` in decimal digits from which ``date(secondsSince1970:)``
    /// gives back the date's own double (seconds since 2001): `timeIntervalSince1970`, a
    /// `Double`, has about half the precision of a date near 2001 (`0.1` s after 2001 read back
    /// as 0.100000023841858). Nil when the digits need more than `Decimal` holds (a date within
    /// 10⁻²⁰ s of 2001): the double is written then.
    private static func exactSecondsSince1970(of date: Date) -> Decimal? {
        let reference = date.timeIntervalSinceReferenceDate
        guard reference.isFinite, let decimal = Decimal(string: "\(reference)") else { return nil }
        let seconds = decimal + secondsFrom1970To2001
        guard let back = Self.date(secondsSince1970: seconds),
            back.timeIntervalSinceReferenceDate.bitPattern == reference.bitPattern
        else { return nil }
        return seconds
    }

    /// The date `seconds` after 1970, rounded once to the nearest double since 2001 (through the
    /// decimal text, which `Double(_:)` rounds correctly); nil when it is not finite.
    private static func date(secondsSince1970 seconds: Decimal) -> Date? {
        guard seconds.isFinite, let reference = Double((seconds - secondsFrom1970To2001).description),
            reference.isFinite
        else { return nil }
        return Date(timeIntervalSinceReferenceDate: reference)
    }

    /// Parses the typed JSON form (`{"type":"int","value":300}`); throws with a one-line reason.
    public init(typedJSON: some Collection<UInt8>) throws(StoredValueError) {
        do {
            self = try JSONCoding.typedDecoder.decode(StoredValue.self, from: Data(typedJSON))
        } catch let error as DecodingError {
            throw StoredValueError(
                "not a typed value such as {\"type\":\"int\",\"value\":300}: \(Self.describe(error))")
        } catch {
            throw StoredValueError("not a typed value: \(error)")
        }
    }

    /// The typed JSON form, one line with sorted keys: `{"type":"int","value":300}`.
    public var typedJSON: String {
        // Only a json value whose text does not parse (another tool wrote it) cannot be encoded.
        guard let data = try? JSONCoding.typedEncoder.encode(self) else { return #"{"type":"null","value":null}"# }
        return String(decoding: data, as: UTF8.self)
    }

    private static func describe(_ error: DecodingError) -> String {
        switch error {
        case .typeMismatch(let type, let context):
            "\(context.codingPath.last?.stringValue ?? "value"): expected \(type)"
        case .valueNotFound(_, let context): "\(context.codingPath.last?.stringValue ?? "value") is missing"
        case .keyNotFound(let key, _): "\"\(key.stringValue)\" is missing"
        case .dataCorrupted(let context):
            context.codingPath.isEmpty
                ? "not valid JSON" : "\(context.codingPath.last?.stringValue ?? ""): \(context.debugDescription)"
        @unknown default: "\(error)"
        }
    }
}

/// Any JSON value, kept exactly enough to write it back: integers stay integers, a number with
/// more digits than a double holds keeps them, and `-0` its sign. For the typed JSON form of
/// ``StoredValue`` and for `pdinspect`.
package indirect enum JSONValue: Codable, Sendable, Equatable {
    case null
    case bool(Bool)
    case int(Int64)
    case uint(UInt64)
    case double(Double)
    /// A number whose digits a double does not hold (a `Decimal` of 25 digits, an integer past
    /// `UInt64.max`).
    case decimal(Decimal)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    package init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Double.self), value == 0, value.sign == .minus {
            // Before the integers, which read `-0` as 0.
            self = .double(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .int(value)
        } else if let value = try? container.decode(UInt64.self) {
            self = .uint(value)
        } else if let value = try? container.decode(Double.self) {
            // `Decimal` reads a number's digits (up to 38) as written; when the double's shortest
            // form says something else, the double lost digits.
            if let decimal = try? container.decode(Decimal.self), decimal.isFinite,
                Decimal(string: "\(value)") != decimal
            {
                self = .decimal(decimal)
            } else {
                self = .double(value)
            }
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .int(let value): try container.encode(value)
        case .uint(let value): try container.encode(value)
        case .double(let value): try container.encode(value)
        case .decimal(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    /// Parses a JSON text; nil when it is not JSON.
    package static func parse(_ text: String) -> JSONValue? {
        try? JSONCoding.typedDecoder.decode(JSONValue.self, from: Data(text.utf8))
    }

    /// The value as compact JSON text with sorted keys, as the library stores JSON values.
    package var text: String {
        // Encoding a JSONValue cannot fail: non-finite doubles are written as strings.
        (try? String(decoding: JSONCoding.typedEncoder.encode(self), as: UTF8.self)) ?? "null"
    }
}

extension StoredValue {
    private static let nonFinite = (positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")

    /// A new encoder of the typed JSON form: one line, sorted keys, non-finite doubles as the
    /// strings `inf`, `-inf` and `nan`. `pdinspect` writes all its JSON with it.
    package static func typedJSONEncoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.nonConformingFloatEncodingStrategy = .convertToString(
            positiveInfinity: nonFinite.positiveInfinity, negativeInfinity: nonFinite.negativeInfinity,
            nan: nonFinite.nan)
        return encoder
    }

    /// A new decoder of the typed JSON form (see ``typedJSONEncoder()``).
    package static func typedJSONDecoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.nonConformingFloatDecodingStrategy = .convertFromString(
            positiveInfinity: nonFinite.positiveInfinity, negativeInfinity: nonFinite.negativeInfinity,
            nan: nonFinite.nan)
        return decoder
    }
}

extension JSONCoding {
    /// The typed JSON form's coders, made once.
    static let typedEncoder = StoredValue.typedJSONEncoder()
    static let typedDecoder = StoredValue.typedJSONDecoder()
}
