import Foundation
import PersistentDefaults

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A key's name with its typed value: `{"name":"launchCount","type":"int","value":3}`.
/// With `isDefault`, the value is the key's declared default (the key is not stored):
/// `"default": true` is added.
struct NamedValue: Encodable {
    var name: String
    var value: StoredValue
    var isDefault: Bool?

    private enum CodingKeys: String, CodingKey {
        case name
        case isDefault = "default"
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(name, forKey: .name)
        try container.encodeIfPresent(isDefault, forKey: .isDefault)
        try TypedValue(value).encode(to: encoder)
    }
}

/// One row of `keys --json`; with `--all`, a declared key that is not stored has `stored: false`,
/// its declared type, no size and its default.
private struct KeyInfo: Encodable {
    var name: String
    var type: String
    var size: Int?
    var stored: Bool?
    var defaultValue: TypedValue?

    private enum CodingKeys: String, CodingKey {
        case name, type, size, stored
        case defaultValue = "default"
    }
}

extension StoredEntry {
    /// The decoded value, or why it does not decode (including JSON values that do not parse).
    var decoded: Result<StoredValue, StoredValueError> {
        do throws(StoredValueError) {
            let value = try storedValue()
            if case .json(let text) = value, JSONValue.parse(text) == nil {
                return .failure(StoredValueError("json payload does not parse as JSON"))
            }
            return .success(value)
        } catch {
            return .failure(error)
        }
    }

    /// The type name for listings: the tag, or `invalid` when the value does not decode.
    var typeName: String {
        (try? decoded.get()).map { $0.tag.description } ?? "invalid"
    }
}

extension Runner {
    func keys(_ store: PersistentDefaults, prefix: String, all: Bool, format: OutputFormat) throws {
        let entries = try store.storedEntries(prefix: prefix)
        // By the names' bytes: a key name is its bytes.
        let stored = Set(entries.map { Array($0.name.utf8) })
        let unstored = try all ? store.declarations() : []
        let unstoredDeclared = unstored.filter {
            $0.name.utf8.starts(with: prefix.utf8) && !stored.contains(Array($0.name.utf8))
        }
        // One list sorted by the names' bytes, as the store sorts them.
        var rows: [(name: String, info: KeyInfo, note: String)] = entries.map {
            ($0.name, KeyInfo(name: $0.name, type: $0.typeName, size: $0.encodedValue.count), "")
        }
        for declaration in unstoredDeclared {
            let value = try? declaration.defaultValue()
            rows.append(
                (
                    declaration.name,
                    KeyInfo(
                        name: declaration.name, type: declaration.typeName, stored: false,
                        defaultValue: value.map(TypedValue.init)),
                    "(default \(value.map { TextTable.cell($0.description) } ?? "undecodable"), not stored)"
                ))
        }
        rows.sort { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }
        if format == .json {
            try printJSON(rows.map(\.info))
            return
        }
        guard !rows.isEmpty else {
            console.print(prefix.isEmpty ? "(no keys)\n" : "(no keys starting with \"\(prefix)\")\n")
            return
        }
        let lines = rows.map { row in
            [TextTable.cell(row.name), row.info.type, row.info.size.map { "\($0)" } ?? "-"]
                + (unstoredDeclared.isEmpty ? [] : [row.note])
        }
        let heading = ["NAME", "TYPE", "SIZE"] + (unstoredDeclared.isEmpty ? [] : [""])
        // Without a note, the empty last column would leave padding at the ends of lines.
        let text = TextTable.render([heading] + lines).split(separator: "\n", omittingEmptySubsequences: false)
        console.print(text.map { String($0.reversed().drop { $0 == " " }.reversed()) }.joined(separator: "\n"))
    }

    func get(_ store: PersistentDefaults, key: String, format: OutputFormat) throws {
        let (stored, declaration) = try store.read { snapshot in
            (try snapshot.storedValue(named: key), try snapshot.declaration(named: key))
        }
        guard let value = try stored ?? declaration.map({ try $0.defaultValue() }) else {
            throw CommandFailure(.failure, "key \"\(key)\" is absent")
        }
        let isDefault = stored == nil
        if format == .json {
            try printJSON(NamedValue(name: key, value: value, isDefault: isDefault ? true : nil))
        } else {
            console.print(value.description + "\n")
        }
        if isDefault {
            console.report("key \"\(key)\" is not stored; printed its declared default")
        }
    }

    func dump(_ store: PersistentDefaults, format: OutputFormat) throws {
        let entries = try store.storedEntries()
        if format == .json {
            var keys: [String: TypedValue] = [:]
            for entry in entries {
                switch entry.decoded {
                case .success(let value):
                    if let other = Self.sameStringKey(entry.name, in: keys) {
                        console.report("left out \"\(entry.name)\": " + Self.sameStringReason(other))
                    } else {
                        keys[entry.name] = TypedValue(value)
                    }
                case .failure(let error): console.report("left out \"\(entry.name)\": \(error)")
                }
            }
            try printJSON(ExportDocument(keys: keys))
            return
        }
        guard !entries.isEmpty else {
            console.print("(no keys)\n")
            return
        }
        let rows = entries.map { entry -> [String] in
            switch entry.decoded {
            case .success(let value): [TextTable.cell(entry.name), value.tag.description, TextTable.cell("\(value)")]
            case .failure(let error): [TextTable.cell(entry.name), "invalid", "(\(error))"]
            }
        }
        console.print(TextTable.render(rows))
    }

    func export(_ store: PersistentDefaults, to file: String) throws {
        var keys: [String: TypedValue] = [:]
        for entry in try store.storedEntries() {
            switch entry.decoded {
            case .success(let value):
                if let other = Self.sameStringKey(entry.name, in: keys) {
                    throw CommandFailure(
                        .unavailable, "cannot export \"\(entry.name)\": " + Self.sameStringReason(other))
                }
                keys[entry.name] = TypedValue(value)
            case .failure(let error):
                throw CommandFailure(
                    .unavailable, "cannot export: value of \"\(entry.name)\" does not decode: \(error)")
            }
        }
        let data = try JSONCoding.pretty.encode(ExportDocument(keys: keys)) + Data("\n".utf8)
        if file == "-" {
            console.print(String(decoding: data, as: UTF8.self))
        } else {
            try Self.writePrivateFile(file, data)
            console.printError("exported \(keys.count) keys to \(file)\n")
        }
    }

    func importDocument(_ document: ExportDocument, into store: PersistentDefaults, replace: Bool, force: Bool) throws {
        let names = document.keys.keys.sorted()
        let removed = try store.write { transaction in
            for name in names {
                let value = document.keys[name]!.value
                if !force { try Self.checkDeclaredType(of: value, named: name, in: transaction) }
                try transaction.setStoredValue(value, named: name)
            }
            guard replace else { return 0 }
            // By the names' bytes: a stored NFD name is not the document's NFC name.
            let kept = Set(names.map { Array($0.utf8) })
            let stale = try transaction.keyNames().filter { !kept.contains(Array($0.utf8)) }
            for name in stale { try transaction.removeValue(named: name) }
            return stale.count
        }
        console.print("imported \(names.count) keys" + (replace ? ", removed \(removed)" : "") + "\n")
    }

    /// Throws a usage failure naming the declared type when `name` is declared
    /// (`PersistentDefaults.declare`) with a type other than `value`'s; `null` fits an optional.
    static func checkDeclaredType(of value: StoredValue, named name: String, in transaction: WriteTransaction) throws {
        guard let declaration = try transaction.declaration(named: name),
            value.tag != declaration.type, !(value == .null && declaration.isOptional)
        else { return }
        throw CommandFailure(
            .usage,
            "key \"\(name)\" is declared as \(declaration.typeName), not \(value.tag); nothing was written "
                + "(--force stores it anyway)")
    }

    /// The name already in `keys` that `String` equality takes for `name` though its UTF-8 bytes
    /// differ (NFC "café" and NFD "cafe\u{301}"): two keys, which one JSON object of an export
    /// file cannot keep apart once read back.
    static func sameStringKey(_ name: String, in keys: [String: TypedValue]) -> String? {
        guard let index = keys.index(forKey: name) else { return nil }
        let other = keys[index].key
        return other.utf8.elementsEqual(name.utf8) ? nil : other
    }

    static func sameStringReason(_ other: String) -> String {
        let bytes = { (name: String) in name.utf8.map { String($0, radix: 16) }.joined(separator: " ") }
        return "its name and the name \"\(other)\" (UTF-8 \(bytes(other))) are different keys that differ only in "
            + "Unicode normalisation, which a JSON object read back by import cannot keep apart"
    }

    /// Writes `data` to `path` with mode 0600, through a temporary file renamed into place, so
    /// that the file is never readable by others and never half written.
    static func writePrivateFile(_ path: String, _ data: Data) throws(CommandFailure) {
        let temporary = path + ".pdinspect-\(getpid())"
        func failure(_ operation: String) -> CommandFailure {
            CommandFailure(.unavailable, "cannot \(operation) \(path): \(String(cString: strerror(errno)))")
        }
        let descriptor = createFile(temporary)
        guard descriptor >= 0 else { throw failure("write") }
        var remaining = data[...]
        while !remaining.isEmpty {
            let written = remaining.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if written < 0, errno == EINTR { continue }
            guard written > 0 else {
                let error = failure("write")
                close(descriptor)
                unlink(temporary)
                throw error
            }
            remaining = remaining.dropFirst(written)
        }
        // The umask may have narrowed 0600 further, never widened it; make it exactly 0600.
        guard fchmod(descriptor, 0o600) == 0, fsync(descriptor) == 0, close(descriptor) == 0 else {
            let error = failure("write")
            unlink(temporary)
            throw error
        }
        guard rename(temporary, path) == 0 else {
            let error = failure("rename into")
            unlink(temporary)
            throw error
        }
    }
}

/// `open(2)` creating a new file with mode 0600 (a free function: `Runner.open` shadows it).
private func createFile(_ path: String) -> Int32 {
    open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
}
