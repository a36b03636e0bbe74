import Foundation
import PersistentDefaults

/// A stored value as JSON that keeps its type: `{"type":"int","value":3}`.
///
/// Data is base64, dates are seconds since 1970, URLs and UUIDs are strings, json values are
/// embedded as JSON, and non-finite doubles are the strings `inf`, `-inf` and `nan`.
struct TypedValue: Codable, Sendable, Equatable {
    var value: StoredValue

    init(_ value: StoredValue) { self.value = value }

    private enum CodingKeys: String, CodingKey {
        case type, value
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(value.tag.description, forKey: .type)
        switch value {
        case .null: try container.encodeNil(forKey: .value)
        case .bool(let bool): try container.encode(bool, forKey: .value)
        case .int(let int): try container.encode(int, forKey: .value)
        case .uint(let uint): try container.encode(uint, forKey: .value)
        case .double(let double): try container.encode(double, forKey: .value)
        case .string(let string): try container.encode(string, forKey: .value)
        case .data(let data): try container.encode(data.base64EncodedString(), forKey: .value)
        case .date(let date): try container.encode(date.timeIntervalSince1970, forKey: .value)
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

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let name = try container.decode(String.self, forKey: .type)
        guard let tag = StoredValue.Tag.allCases.first(where: { $0.description == name }) else {
            let names = StoredValue.Tag.allCases.map(\.description)
            throw DecodingError.dataCorruptedError(
                forKey: .type, in: container,
                debugDescription: "unknown type '\(name)'" + Suggestion.hint(for: name, among: names))
        }
        func text() throws -> String { try container.decode(String.self, forKey: .value) }
        func invalid(_ what: String) -> DecodingError {
            .dataCorruptedError(forKey: .value, in: container, debugDescription: "not \(what)")
        }
        switch tag {
        case .null:
            guard try container.decodeNil(forKey: .value) else { throw invalid("null") }
            value = .null
        case .bool: value = .bool(try container.decode(Bool.self, forKey: .value))
        case .int: value = .int(try container.decode(Int64.self, forKey: .value))
        case .uint: value = .uint(try container.decode(UInt64.self, forKey: .value))
        case .double: value = .double(try container.decode(Double.self, forKey: .value))
        case .string: value = .string(try text())
        case .data:
            guard let data = Data(base64Encoded: try text()) else { throw invalid("base64 data") }
            value = .data(data)
        case .date: value = .date(Date(timeIntervalSince1970: try container.decode(Double.self, forKey: .value)))
        case .url:
            guard let url = URL(string: try text()) else { throw invalid("a URL") }
            value = .url(url)
        case .uuid:
            guard let uuid = UUID(uuidString: try text()) else { throw invalid("a UUID") }
            value = .uuid(uuid)
        case .json: value = .json(try container.decode(JSONValue.self, forKey: .value).text)
        }
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
