import PersistentDefaults

/// Turns `pdinspect`'s arguments into a ``Command``: a pure function, so every path is testable.
///
/// ```swift
/// let command = try CommandParser.parse(["keys", "settings", "--prefix", "window."])
/// // .keys(database: "settings", prefix: "window.", format: .human)
/// ```
public enum CommandParser {
    /// Parses the arguments after the program name: the verb first, the database path second.
    public static func parse(_ arguments: [String]) throws(UsageError) -> Command {
        guard let first = arguments.first else { throw UsageError("no verb given") }
        let rest = Array(arguments.dropFirst())
        switch first {
        case "--help", "-h":
            guard rest.isEmpty else { throw UsageError("unexpected argument '\(rest[0])' after \(first)") }
            return .help(nil)
        case "help":
            guard let name = rest.first else { return .help(nil) }
            guard rest.count == 1 else { throw UsageError("unexpected argument '\(rest[1])' after help \(name)") }
            return .help(try verb(named: name))
        default:
            let verb = try verb(named: first)
            if asksForHelp(rest, for: verb) { return .help(verb) }
            return Command(try verb.command.parse(ParsedArguments(rest, for: verb)))
        }
    }

    /// Whether `--help` or `-h` is among `arguments` as an option: not after `--` and not the
    /// value of an option (`get db -- -h` reads the key `-h`, `keys db --prefix -h` lists keys).
    private static func asksForHelp(_ arguments: [String], for verb: Verb) -> Bool {
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if argument == "--" { return false }
            if argument == "--help" || argument == "-h" { return true }
            if verb.options.contains(where: { $0.name == argument && $0.value != nil }) { index += 1 }
        }
        return false
    }

    private static func verb(named name: String) throws(UsageError) -> Verb {
        if let verb = Verb(rawValue: name) { return verb }
        let names = Verb.allCases.map(\.rawValue)
        if name.hasPrefix("-") {
            throw UsageError(
                "expected a verb before options, found '\(name)'" + Suggestion.hint(for: name, among: ["--help"]))
        }
        throw UsageError("unknown verb '\(name)'" + Suggestion.hint(for: name, among: names))
    }
}

/// A verb's arguments split into positionals and options, checked against the verb's options.
struct ParsedArguments {
    let verb: Verb
    private(set) var positional: [String] = []
    private var options: [String: String] = [:]

    init(_ arguments: [String], for verb: Verb) throws(UsageError) {
        self.verb = verb
        let specs = verb.options
        var index = 0
        var optionsEnded = false
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if optionsEnded || !Self.looksLikeOption(argument) {
                positional.append(argument)
                continue
            }
            if argument == "--" {
                optionsEnded = true
                continue
            }
            let parts = argument.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = String(parts[0])
            guard let spec = specs.first(where: { $0.name == name }) else {
                let names = specs.map(\.name) + ["--help"]
                let hint = Suggestion.hint(for: name, among: names)
                let known = specs.isEmpty ? " (\(verb.rawValue) takes no options)" : ""
                throw error("unknown option '\(name)' for \(verb.rawValue)\(hint)\(known)")
            }
            guard options[name] == nil else { throw error("\(name) is given twice") }
            if spec.value == nil {
                guard parts.count == 1 else { throw error("\(name) takes no value") }
                options[name] = ""
            } else if parts.count == 2 {
                options[name] = String(parts[1])
            } else {
                guard index < arguments.count else {
                    throw error("\(name) needs a value \(spec.value ?? "")")
                }
                options[name] = arguments[index]
                index += 1
            }
        }
    }

    /// Options start with `-`; a negative number such as `-5` is a value.
    private static func looksLikeOption(_ argument: String) -> Bool {
        argument.hasPrefix("-") && argument.count > 1 && Double(argument) == nil
            && !["-inf", "-infinity"].contains(argument.lowercased())
    }

    /// A usage error about this verb's arguments.
    func error(_ message: String) -> UsageError { UsageError(message, verb: verb) }

    /// Whether `--json` was given.
    var format: OutputFormat { flag("--json") ? .json : .human }

    func flag(_ name: String) -> Bool { options[name] != nil }

    func value(_ name: String) -> String? { options[name] }

    /// The positionals named `names`, all required, then any number named `variadic`.
    func positionals(_ names: [String], variadic: String? = nil) throws(UsageError) -> [String] {
        if positional.count < names.count {
            throw error("missing \(names[positional.count])")
        }
        if variadic == nil, positional.count > names.count {
            throw error("unexpected argument '\(positional[names.count])'")
        }
        guard !positional[0].isEmpty else { throw error("the database path is empty") }
        return positional
    }

    /// The positionals `DB KEY`, the key checked as a key name.
    func databaseAndKey() throws(UsageError) -> (database: String, key: String) {
        let values = try positionals(["DB", "KEY"])
        return (values[0], try key(values[1]))
    }

    /// `name`, checked as a key name (`PersistentDefaults.validateKeyName`).
    func key(_ name: String) throws(UsageError) -> String {
        do {
            try PersistentDefaults.validateKeyName(name)
        } catch {
            throw self.error(error.description)
        }
        return name
    }

    func since() throws(UsageError) -> UInt64? {
        guard let text = value("--since") else { return nil }
        guard let number = UInt64(text) else {
            throw error("--since needs a sequence number (0 or more), not '\(text)'")
        }
        return number
    }

    func count(_ name: String) throws(UsageError) -> Int? {
        guard let text = value(name) else { return nil }
        guard let number = Int(text), number > 0 else {
            throw error("\(name) needs a whole number above 0, not '\(text)'")
        }
        return number
    }

    /// The longest `--timeout`, about 31 years: a longer one overflows the integer nanoseconds and
    /// milliseconds that the follow loop's and the mirror's waits are counted in (trapped at 1e10).
    static let maximumTimeout: Double = 1_000_000_000

    /// `seconds` as a duration, bounded to 0…`maximumTimeout` (NaN is 0): for timeouts given
    /// through the API, which the parser has not checked.
    static func timeoutDuration(seconds: Double) -> Duration {
        .seconds(seconds.isNaN ? 0 : min(max(seconds, 0), maximumTimeout))
    }

    func timeout() throws(UsageError) -> Double? {
        guard let text = value("--timeout") else { return nil }
        guard let seconds = Double(text), seconds > 0, seconds <= Self.maximumTimeout else {
            throw error("--timeout needs a number of seconds above 0 and at most 1000000000, not '\(text)'")
        }
        return seconds
    }
}
