import Foundation
import PersistentDefaults

/// A stored value as JSON that keeps its type: `{"type":"int","value":3}` — the library's
/// typed JSON form (`StoredValue`'s `Codable`), with a "did you mean" hint for a wrong type name.
struct TypedValue: Codable, Sendable, Equatable {
    var value: StoredValue

    init(_ value: StoredValue) { self.value = value }

    private enum CodingKeys: String, CodingKey {
        case type
    }

    func encode(to encoder: any Encoder) throws { try value.encode(to: encoder) }

    /// Checks the type name first, for a "did you mean" hint, then decodes as the library does.
    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let name = try container.decode(String.self, forKey: .type)
        let names = StoredValue.Tag.allCases.map(\.description)
        guard names.contains(name) else {
            throw DecodingError.dataCorruptedError(
                forKey: .type, in: container,
                debugDescription: "unknown type '\(name)'" + Suggestion.hint(for: name, among: names))
        }
        value = try StoredValue(from: decoder)
    }
}

/// The file `pdinspect export` writes and `import` reads, also printed by `dump --json`.
struct ExportDocument: Codable, Sendable, Equatable {
    static let formatName = "pdinspect-export"
    static let currentVersion = 1

    var format = ExportDocument.formatName
    var version = ExportDocument.currentVersion
    var keys: [String: TypedValue]

    init(keys: [String: TypedValue]) { self.keys = keys }

    private enum CodingKeys: String, CodingKey {
        case format, version, keys
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        format = try container.decode(String.self, forKey: .format)
        guard format == Self.formatName else {
            throw DecodingError.dataCorruptedError(
                forKey: .format, in: container, debugDescription: "expected \"\(Self.formatName)\", found \"\(format)\""
            )
        }
        version = try container.decode(Int.self, forKey: .version)
        guard version == Self.currentVersion else {
            throw DecodingError.dataCorruptedError(
                forKey: .version, in: container, debugDescription: "version \(version) is not supported (only 1)")
        }
        keys = try container.decode([String: TypedValue].self, forKey: .keys)
    }

    /// Parses and validates an export file: the format, every value and every key name.
    static func parse(_ data: Data) throws(UsageError) -> ExportDocument {
        let document: ExportDocument
        do {
            document = try JSONCoding.decoder.decode(ExportDocument.self, from: data)
        } catch let error as DecodingError {
            throw UsageError("malformed import file: \(describe(error))", verb: .import)
        } catch {
            throw UsageError("malformed import file: \(error)", verb: .import)
        }
        for name in document.keys.keys.sorted() {
            do {
                try PersistentDefaults.validateKeyName(name)
            } catch {
                throw UsageError("malformed import file: \(error)", verb: .import)
            }
        }
        return document
    }

    /// A one-line account of a decoding error: where, and what.
    static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context) -> String {
            let path = context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined()
            return path.isEmpty ? "" : "at \(path.dropFirst(path.hasPrefix(".") ? 1 : 0)): "
        }
        switch error {
        case .typeMismatch(let type, let context):
            return path(context) + "expected \(type == Int64.self ? "an integer" : "\(type)")"
        case .valueNotFound(_, let context):
            return path(context) + "a value is missing"
        case .keyNotFound(let key, let context):
            return path(context) + "\"\(key.stringValue)\" is missing"
        case .dataCorrupted(let context):
            if context.codingPath.isEmpty { return "not valid JSON" }
            return path(context) + context.debugDescription
        @unknown default:
            return "\(error)"
        }
    }
}

extension ExportDocument {
    /// Why a stored entry cannot go into an export document.
    enum LeftOut: Error, CustomStringConvertible {
        /// The value does not decode.
        case undecodable(StoredValueError)
        /// `String` equality takes the entry's name for `other`, an earlier name whose UTF-8
        /// bytes differ (NFC "café" and NFD "cafe\u{301}"): two keys, which one JSON object of an
        /// export file cannot keep apart once read back.
        case sameString(as: String)
        /// The stored name is not valid UTF-8: the entry's name is its repaired form, another
        /// key's name, and JSON cannot hold the stored bytes.
        case nameNotUTF8

        var description: String {
            switch self {
            case .undecodable(let error): "\(error)"
            case .nameNotUTF8:
                "its stored name is not valid UTF-8 (shown repaired with U+FFFD, which is another key's name)"
            case .sameString(let other):
                "its name and the name \"\(other)\" (UTF-8 "
                    + other.utf8.map { String($0, radix: 16) }.joined(separator: " ")
                    + ") are different keys that differ only in Unicode normalisation, which a JSON object "
                    + "read back by import cannot keep apart"
            }
        }
    }

    /// The document of `entries`; each entry it cannot hold is passed to `leaveOut` with why
    /// (which may throw to give up).
    init(_ entries: [StoredEntry], leaveOut: (StoredEntry, LeftOut) throws -> Void) rethrows {
        var keys: [String: TypedValue] = [:]
        for entry in entries {
            guard entry.nameIsUTF8 else {
                try leaveOut(entry, .nameNotUTF8)
                continue
            }
            switch entry.decoded {
            case .success(let value):
                if let index = keys.index(forKey: entry.name), !keys[index].key.utf8.elementsEqual(entry.name.utf8) {
                    try leaveOut(entry, .sameString(as: keys[index].key))
                } else {
                    keys[entry.name] = TypedValue(value)
                }
            case .failure(let error): try leaveOut(entry, .undecodable(error))
            }
        }
        self.init(keys: keys)
    }
}
