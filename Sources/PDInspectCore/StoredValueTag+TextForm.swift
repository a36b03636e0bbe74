import Foundation
import PersistentDefaults

/// How `pdinspect set` reads a value of one type from the command line.
struct TextForm: Sendable {
    /// The text it accepts, as `set --help` and the manual's type table show it.
    let syntax: String
    /// The value `text` stands for; nil when it is not valid.
    let parse: @Sendable (_ text: String) -> StoredValue?

    init(_ syntax: String, parse: @escaping @Sendable (_ text: String) -> StoredValue?) {
        self.syntax = syntax
        self.parse = parse
    }
}

// The types `set --type T` accepts are the library's tags (`StoredValue.Tag`), by their names; a
// new tag makes the switch below fail to compile until it says how `set` reads it.
extension StoredValue.Tag {
    /// How `set --type` reads a value of this type; nil for `null`, which has no text form.
    var textForm: TextForm? {
        switch self {
        case .null: nil
        case .bool:
            TextForm("true, false, yes, no, 1, 0") { text in
                switch text.lowercased() {
                case "true", "yes", "1": .bool(true)
                case "false", "no", "0": .bool(false)
                default: nil
                }
            }
        case .int: TextForm("a decimal integer (64-bit)") { Int64($0).map { .int($0) } }
        case .uint: TextForm("a decimal integer of 0 or more (64-bit)") { UInt64($0).map { .uint($0) } }
        case .double: TextForm("a decimal number, or inf, -inf, nan") { Self.double($0).map { .double($0) } }
        case .string: TextForm("the text as given") { .string($0) }
        case .data:
            TextForm("hexadecimal bytes (0a1b2c), optionally <0a 1b 2c>") { Self.hexBytes($0).map { .data(Data($0)) } }
        case .date:
            TextForm("ISO 8601 (2026-01-31T12:00:00Z, fractional seconds allowed) or seconds since 1970") {
                Self.date($0).map { .date($0) }
            }
        case .url:
            TextForm("an absolute URL (https://example.com/a)") { text in
                URL(string: text).flatMap { $0.scheme == nil ? nil : .url($0) }
            }
        case .uuid: TextForm("a UUID (E621E1F8-C36C-495A-93FC-0C247A3E6E5F)") { UUID(uuidString: $0).map { .uuid($0) } }
        case .json:
            TextForm("any JSON text; stored compact with sorted keys") { JSONValue.parse($0).map { .json($0.text) } }
        }
    }

    /// The tags `set --type` accepts, in the library's order: every tag with a text form.
    static var settable: [Self] { allCases.filter { $0.textForm != nil } }

    private static func double(_ text: String) -> Double? {
        switch text.lowercased() {
        case "inf", "+inf", "infinity": return .infinity
        case "-inf", "-infinity": return -.infinity
        case "nan": return .nan
        default:
            guard let value = Double(text), value.isFinite else { return nil }
            return value
        }
    }

    private static func date(_ text: String) -> Date? {
        if let seconds = Double(text), seconds.isFinite { return Date(timeIntervalSince1970: seconds) }
        let withFraction = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
        if let date = try? withFraction.parse(text) { return date }
        return try? Date.ISO8601FormatStyle().parse(text)
    }

    private static func hexBytes(_ text: String) -> [UInt8]? {
        var digits = Substring(text)
        if digits.hasPrefix("<"), digits.hasSuffix(">"), digits.count >= 2 { digits = digits.dropFirst().dropLast() }
        let nibbles = digits.filter { !$0.isWhitespace }.map { $0.hexDigitValue }
        guard nibbles.count.isMultiple(of: 2), !nibbles.contains(nil) else { return nil }
        return stride(from: 0, to: nibbles.count, by: 2).map { UInt8(nibbles[$0]! << 4 | nibbles[$0 + 1]!) }
    }
}
