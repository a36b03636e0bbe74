import PersistentDefaults

/// `pdinspect dump DB`: every key with its decoded value.
struct DumpVerb: VerbCommand {
    var database: String
    var format: OutputFormat

    static let name = "dump"
    static let synopsis = "DB [--json]"
    static let summary = "every key with its decoded value"
    static let options = [OptionSpec.json]

    static func parse(_ arguments: ParsedArguments) throws(UsageError) -> Self {
        Self(database: try arguments.positionals(["DB"])[0], format: arguments.format)
    }

    func run(in runner: Runner) throws {
        let entries = try runner.open(database).storedEntries()
        if format == .json {
            let document = ExportDocument(entries) { entry, reason in
                runner.console.report("left out \"\(entry.name)\": \(reason)")
            }
            try runner.printJSON(document)
            return
        }
        guard !entries.isEmpty else {
            runner.console.print("(no keys)\n")
            return
        }
        let rows = entries.map { entry -> [String] in
            switch entry.decoded {
            case .success(let value): [TextTable.cell(entry.name), value.tag.description, TextTable.cell("\(value)")]
            case .failure(let error): [TextTable.cell(entry.name), "invalid", "(\(error))"]
            }
        }
        runner.console.print(TextTable.render(rows))
    }
}

extension Verb {
    /// `dump`
    public static let dump = Verb(DumpVerb.self)
}

extension Command {
    /// Print every key with its decoded value.
    public static func dump(database: String, format: OutputFormat) -> Command {
        Command(DumpVerb(database: database, format: format))
    }
}
