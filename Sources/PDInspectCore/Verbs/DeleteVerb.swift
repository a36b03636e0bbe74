/// `pdinspect delete DB KEY`: removes a key in one logged transaction.
struct DeleteVerb: VerbCommand {
    var database: String
    var key: String

    static let name = "delete"
    static let synopsis = "DB KEY"
    static let summary = "remove KEY (exit 1 if absent)"
    static let options: [OptionSpec] = []

    static func parse(_ arguments: ParsedArguments) throws(UsageError) -> Self {
        let (database, key) = try arguments.databaseAndKey()
        return Self(database: database, key: key)
    }

    func run(in runner: Runner) throws {
        guard try runner.open(database, readOnly: false).removeValue(named: key) else {
            throw CommandFailure(.failure, "key \"\(key)\" is absent")
        }
    }
}

extension Verb {
    /// `delete`
    public static let delete = Verb(DeleteVerb.self)
}

extension Command {
    /// Remove a key.
    public static func delete(database: String, key: String) -> Command {
        Command(DeleteVerb(database: database, key: key))
    }
}
