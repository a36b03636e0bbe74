/// `pdinspect --help`, `pdinspect help VERB` and `pdinspect VERB --help`.
struct HelpCommand: CommandBody {
    /// The verb to explain; nil for the overview.
    var verb: Verb?

    func run(in runner: Runner) throws {
        runner.console.print(verb.map(HelpText.help(for:)) ?? HelpText.overview)
    }
}

extension Command {
    /// Print the overview, or one verb's help when `verb` is set.
    public static func help(_ verb: Verb?) -> Command { Command(HelpCommand(verb: verb)) }
}

/// The text of `pdinspect --help` and `pdinspect VERB --help`, made from the verb registry.
public enum HelpText {
    /// The overview: every verb, the common options and the exit codes.
    public static var overview: String {
        var lines = [
            "pdinspect: inspect, edit and maintain a PersistentDefaults store (an LMDB directory).",
            "",
            "usage: pdinspect VERB DB [ARGUMENTS] [OPTIONS]",
            "       pdinspect VERB --help",
            "",
            "verbs:",
        ]
        for verb in Verb.allCases {
            lines.append("  \(verb.rawValue) \(verb.synopsis)")
            lines.append("        " + verb.summary)
        }
        lines += [
            "",
            "DB is the store's directory. Verbs that only read open it read-only: they never change",
            "data.mdb and never create a store. set, delete and import write through the library, so",
            "their commits are logged and reach the observers of running processes.",
            "--json makes every reading verb print JSON.",
            "",
        ]
        lines += exitCodes
        return lines.joined(separator: "\n") + "\n"
    }

    /// One verb's help: usage, options, details and the exit codes.
    public static func help(for verb: Verb) -> String {
        var lines = ["usage: pdinspect \(verb.rawValue) \(verb.synopsis)", "", verb.summary.capitalizedFirst + "."]
        let options = verb.options + [OptionSpec("--help", help: "show this help")]
        let labels = options.map { $0.name + ($0.value.map { " \($0)" } ?? "") }
        let width = labels.map(\.count).max() ?? 0
        lines += ["", "options:"]
        for (label, option) in zip(labels, options) {
            lines.append("  " + label.padding(toLength: width, withPad: " ", startingAt: 0) + "  " + option.help)
        }
        if !verb.details.isEmpty { lines += ["", verb.details] }
        lines.append("")
        lines += exitCodes
        return lines.joined(separator: "\n") + "\n"
    }

    private static var exitCodes: [String] {
        ["exit codes:"] + ExitCode.allCases.map { "  \($0.rawValue)  \($0.meaning)" }
    }
}

extension String {
    fileprivate var capitalizedFirst: String { prefix(1).uppercased() + dropFirst() }
}
