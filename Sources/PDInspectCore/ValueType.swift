import Foundation
import PersistentDefaults

/// The types `pdinspect set --type T` accepts, and how each parses its text.
public enum ValueType: String, Sendable, CaseIterable {
    /// `true`, `false`, `yes`, `no`, `1`, `0`.
    case bool
    /// A signed decimal integer (64-bit).
    case int
    /// An unsigned decimal integer (64-bit).
    case uint
    /// A decimal number, or `inf`, `-inf`, `nan`.
    case double
    /// The text as given.
    case string
    /// ISO 8601 (`2026-01-31T12:00:00Z`, fractional seconds allowed) or seconds since 1970.
    case date
    /// Hexadecimal bytes, optionally inside `<…>` with spaces.
    case data
    /// Any JSON text; stored compact with sorted keys.
    case json
    /// An absolute URL.
    case url
    /// A UUID such as `E621E1F8-C36C-495A-93FC-0C247A3E6E5F`.
    case uuid

    /// Parses `text` as a value of this type.
    public func parse(_ text: String) throws(UsageError) -> StoredValue {
        let invalid = UsageError("'\(text.prefix(60))' is not a valid \(rawValue) value", verb: .set)
        switch self {
        case .bool:
            switch text.lowercased() {
            case "true", "yes", "1": return .bool(true)
            case "false", "no", "0": return .bool(false)
            default: throw invalid
            }
        case .int:
            guard let value = Int64(text) else { throw invalid }
            return .int(value)
        case .uint:
            guard let value = UInt64(text) else { throw invalid }
            return .uint(value)
        case .double:
            guard let value = Self.double(text) else { throw invalid }
            return .double(value)
        case .string:
            return .string(text)
        case .date:
            guard let date = Self.date(text) else { throw invalid }
            return .date(date)
        case .data:
            guard let bytes = Self.hexBytes(text) else { throw invalid }
            return .data(Data(bytes))
        case .json:
            guard let value = JSONValue.parse(text) else { throw invalid }
            return .json(value.text)
        case .url:
            guard let url = URL(string: text), url.scheme != nil else { throw invalid }
            return .url(url)
        case .uuid:
            guard let uuid = UUID(uuidString: text) else { throw invalid }
            return .uuid(uuid)
        }
    }

    static func double(_ text: String) -> Double? {
        switch text.lowercased() {
        case "inf", "+inf", "infinity": return .infinity
        case "-inf", "-infinity": return -.infinity
        case "nan": return .nan
        default:
            guard let value = Double(text), value.isFinite else { return nil }
            return value
        }
    }

    static func date(_ text: String) -> Date? {
        if let seconds = Double(text), seconds.isFinite { return Date(timeIntervalSince1970: seconds) }
        let withFraction = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
        if let date = try? withFraction.parse(text) { return date }
        return try? Date.ISO8601FormatStyle().parse(text)
    }

    static func hexBytes(_ text: String) -> [UInt8]? {
        var digits = Substring(text)
        if digits.hasPrefix("<"), digits.hasSuffix(">"), digits.count >= 2 { digits = digits.dropFirst().dropLast() }
        let nibbles = digits.filter { !$0.isWhitespace }.map { $0.hexDigitValue }
        guard nibbles.count.isMultiple(of: 2), !nibbles.contains(nil) else { return nil }
        return stride(from: 0, to: nibbles.count, by: 2).map { UInt8(nibbles[$0]! << 4 | nibbles[$0 + 1]!) }
    }
}
