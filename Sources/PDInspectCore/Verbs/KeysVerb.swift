import PersistentDefaults

/// `pdinspect keys DB [--prefix P] [--all]`: name, type and size of each stored key.
struct KeysVerb: VerbCommand {
    var database: String
    var prefix: String
    var all = false
    var format: OutputFormat

    static let name = "keys"
    static let synopsis = "DB [--prefix P] [--all] [--json]"
    static let summary = "name, type and size of each stored key; with --all also declared keys not stored"
    static let options = [
        OptionSpec("--prefix", value: "P", help: "only keys whose name starts with P"),
        OptionSpec("--all", help: "also list declared keys that are not stored, with their default"), .json,
    ]
    static let details =
        "With --all, a declared key that is not stored is listed with its declared type and \"(default …)\"."

    static func parse(_ arguments: ParsedArguments) throws(UsageError) -> Self {
        let database = try arguments.positionals(["DB"])[0]
        return Self(
            database: database, prefix: arguments.value("--prefix") ?? "", all: arguments.flag("--all"),
            format: arguments.format)
    }

    func run(in runner: Runner) throws {
        let store = try runner.open(database)
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
            try runner.printJSON(rows.map(\.info))
            return
        }
        guard !rows.isEmpty else {
            runner.console.print(prefix.isEmpty ? "(no keys)\n" : "(no keys starting with \"\(prefix)\")\n")
            return
        }
        let lines = rows.map { row in
            [TextTable.cell(row.name), row.info.type, row.info.size.map { "\($0)" } ?? "-"]
                + (unstoredDeclared.isEmpty ? [] : [row.note])
        }
        let heading = ["NAME", "TYPE", "SIZE"] + (unstoredDeclared.isEmpty ? [] : [""])
        // Without a note, the empty last column would leave padding at the ends of lines.
        let text = TextTable.render([heading] + lines).split(separator: "\n", omittingEmptySubsequences: false)
        runner.console.print(text.map { String($0.reversed().drop { $0 == " " }.reversed()) }.joined(separator: "\n"))
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

extension Verb {
    /// `keys`
    public static let keys = Verb(KeysVerb.self)
}

extension Command {
    /// List the stored keys (name, type, size), optionally only those starting with `prefix`;
    /// with `all`, also the declared keys that are not stored, with their default.
    public static func keys(database: String, prefix: String, all: Bool = false, format: OutputFormat) -> Command {
        Command(KeysVerb(database: database, prefix: prefix, all: all, format: format))
    }
}
