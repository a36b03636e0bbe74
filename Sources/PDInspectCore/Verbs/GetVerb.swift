import PersistentDefaults

/// `pdinspect get DB KEY`: a key's decoded value, or its declared default.
struct GetVerb: VerbCommand {
    var database: String
    var key: String
    var format: OutputFormat

    static let name = "get"
    static let synopsis = "DB KEY [--json]"
    static let summary = "the decoded value of KEY, or its declared default (exit 1 if neither)"
    static let options = [OptionSpec.json]
    static let details = """
        Prints strings raw, data as <hex>, dates in ISO 8601 (outside 1582-10-15…9999-12-31, or
        not a number: their seconds since 1970, with a note). With --json: {"name","type","value"}.
        A key that is not stored but declared (PersistentDefaults.declare) prints its declared
        default, says so on standard error and exits 0; with --json "default": true is added.
        """

    static func parse(_ arguments: ParsedArguments) throws(UsageError) -> Self {
        let (database, key) = try arguments.databaseAndKey()
        return Self(database: database, key: key, format: arguments.format)
    }

    func run(in runner: Runner) throws {
        let (stored, declaration) = try runner.open(database).read { snapshot in
            (try snapshot.storedValue(named: key), try snapshot.declaration(named: key))
        }
        guard let value = try stored ?? declaration.map({ try $0.defaultValue() }) else {
            throw CommandFailure(.failure, "key \"\(key)\" is absent")
        }
        let isDefault = stored == nil
        if format == .json {
            try runner.printJSON(NamedValue(name: key, value: value, isDefault: isDefault ? true : nil))
        } else {
            runner.console.print(value.description + "\n")
        }
        if isDefault {
            runner.console.report("key \"\(key)\" is not stored; printed its declared default")
        }
    }
}

/// A key's name with its typed value: `{"name":"launchCount","type":"int","value":3}`.
/// With `isDefault`, the value is the key's declared default (the key is not stored):
/// `"default": true` is added.
private struct NamedValue: Encodable {
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

extension Verb {
    /// `get`
    public static let get = Verb(GetVerb.self)
}

extension Command {
    /// Print one key's decoded value, or its declared default when it is not stored.
    public static func get(database: String, key: String, format: OutputFormat) -> Command {
        Command(GetVerb(database: database, key: key, format: format))
    }
}
