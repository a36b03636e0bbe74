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
