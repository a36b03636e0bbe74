import PersistentDefaults

/// `pdinspect check DB`: verifies that every value decodes and the log is consistent.
struct CheckVerb: VerbCommand {
    var database: String
    var format: OutputFormat

    static let name = "check"
    static let synopsis = "DB [--json]"
    static let summary =
        "verify that every value decodes and the log is consistent (exit 1 if not; exit 3 with one line when LMDB cannot read a damaged page)"
    static let options = [OptionSpec.json]

    static func parse(_ arguments: ParsedArguments) throws(UsageError) -> Self {
        Self(database: try arguments.positionals(["DB"])[0], format: arguments.format)
    }

    func run(in runner: Runner) throws {
        let store = try runner.open(database)
        let problems = try store.verify()
        let stats = try store.statistics()
        if format == .json {
            try runner.printJSON(
                CheckReport(
                    ok: problems.isEmpty, keys: stats.values.entries, logRecords: stats.log.entries, problems: problems)
            )
        } else if problems.isEmpty {
            runner.console.print(
                "ok: \(stats.values.entries) keys and \(stats.log.entries) log records checked, no problems\n")
        } else {
            let lines = problems.map { "  \($0)\n" }.joined()
            runner.console.print("\(problems.count) problem\(problems.count == 1 ? "" : "s") found:\n" + lines)
        }
        if !problems.isEmpty {
            throw CommandFailure(.failure, "check found \(problems.count) problem\(problems.count == 1 ? "" : "s")")
        }
    }
}

/// `check --json`.
private struct CheckReport: Encodable {
    var ok: Bool
    var keys: Int
    var logRecords: Int
    var problems: [String]
}

extension Verb {
    /// `check`
    public static let check = Verb(CheckVerb.self)
}

extension Command {
    /// Verify that every value decodes and the log is consistent.
    public static func check(database: String, format: OutputFormat) -> Command {
        Command(CheckVerb(database: database, format: format))
    }
}
