import PersistentDefaults

/// `pdinspect set DB KEY VALUE --type T`: stores one value in one logged transaction.
struct SetVerb: VerbCommand {
    var database: String
    var key: String
    var value: StoredValue
    var force = false

    static let name = "set"
    static let synopsis = "DB KEY VALUE --type T [--force]"
    static let summary = "store VALUE under KEY as type T, in one logged transaction"
    static var options: [OptionSpec] {
        [
            OptionSpec(
                "--type", value: "T",
                help: "the value's type: " + StoredValue.Tag.settable.map(\.description).joined(separator: ", ")),
            .force,
        ]
    }
    static var details: String {
        let types = StoredValue.Tag.settable.map { ["  \($0)", $0.textForm?.syntax ?? ""] }
        return "VALUE by type T:\n" + TextTable.render(types)
            + """

            Example: pdinspect set ~/settings launchCount 3 --type int
            A key declared by the code (PersistentDefaults.declare) takes only its declared type: another
            type exits 2 naming the declared one, unless --force. A key of a type narrower than its tag
            (int8 … uint32, float: Int8 … UInt32, Float) takes the tag (--type int for int8) and exits 2 for
            a value the type cannot hold (1000 for int8), unless --force. A value larger than 64 MiB exits 2.
            """
    }

    static func parse(_ arguments: ParsedArguments) throws(UsageError) -> Self {
        let values = try arguments.positionals(["DB", "KEY", "VALUE"])
        guard let typeName = arguments.value("--type") else { throw arguments.error("set needs --type T") }
        let names = StoredValue.Tag.settable.map(\.description)
        guard let tag = StoredValue.Tag.settable.first(where: { $0.description == typeName }),
            let form = tag.textForm
        else {
            throw arguments.error("unknown type '\(typeName)'" + Suggestion.hint(for: typeName, among: names))
        }
        let key = try arguments.key(values[1])
        let text = values[2]
        guard let value = form.parse(text) else {
            throw arguments.error("'\(text.prefix(60))' is not a valid \(tag) value")
        }
        return Self(database: values[0], key: key, value: value, force: arguments.flag("--force"))
    }

    func run(in runner: Runner) throws {
        try runner.open(database, readOnly: false).write { transaction in
            if !force { try transaction.checkDeclaredType(of: value, named: key) }
            try transaction.setStoredValue(value, named: key)
        }
    }
}

extension Verb {
    /// `set`
    public static let set = Verb(SetVerb.self)
}

extension Command {
    /// Store a value under a key in one transaction; unless `force`, only of the declared type.
    public static func set(database: String, key: String, value: StoredValue, force: Bool = false) -> Command {
        Command(SetVerb(database: database, key: key, value: value, force: force))
    }
}
