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
            if rest.contains(where: { $0 == "--help" || $0 == "-h" }) { return .help(verb) }
            return try parse(verb, ParsedArguments(rest, for: verb))
        }
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

    private static func parse(_ verb: Verb, _ arguments: ParsedArguments) throws(UsageError) -> Command {
        let format: OutputFormat = arguments.flag("--json") ? .json : .human
        switch verb {
        case .keys:
            let database = try arguments.positionals(["DB"])[0]
            return .keys(
                database: database, prefix: arguments.value("--prefix") ?? "", all: arguments.flag("--all"),
                format: format)
        case .get:
            let values = try arguments.positionals(["DB", "KEY"])
            return .get(database: values[0], key: try key(values[1], verb), format: format)
        case .describe:
            let values = try arguments.positionals(["DB", "KEY"])
            return .describe(database: values[0], key: try key(values[1], verb), format: format)
        case .set:
            let values = try arguments.positionals(["DB", "KEY", "VALUE"])
            guard let typeName = arguments.value("--type") else {
                throw UsageError("set needs --type T", verb: verb)
            }
            guard let type = ValueType(rawValue: typeName) else {
                throw UsageError(
                    "unknown type '\(typeName)'"
                        + Suggestion.hint(for: typeName, among: ValueType.allCases.map(\.rawValue)), verb: verb)
            }
            return .set(
                database: values[0], key: try key(values[1], verb), value: try type.parse(values[2]),
                force: arguments.flag("--force"))
        case .delete:
            let values = try arguments.positionals(["DB", "KEY"])
            return .delete(database: values[0], key: try key(values[1], verb))
        case .dump:
            return .dump(database: try arguments.positionals(["DB"])[0], format: format)
        case .export:
            let values = try arguments.positionals(["DB", "FILE"])
            return .export(database: values[0], file: values[1])
        case .import:
            let values = try arguments.positionals(["DB", "FILE"])
            return .import(
                database: values[0], file: values[1], replace: arguments.flag("--replace"),
                force: arguments.flag("--force"))
        case .stat:
            return .stat(database: try arguments.positionals(["DB"])[0], format: format)
        case .log:
            let database = try arguments.positionals(["DB"])[0]
            let range = LogRange(since: try arguments.since(), limit: try arguments.count("--limit"))
            let limits = FollowOptions(maxEvents: try arguments.count("--max-events"), timeout: try arguments.timeout())
            guard arguments.flag("--follow") || limits == FollowOptions() else {
                throw UsageError("--max-events and --timeout need --follow", verb: verb)
            }
            return .log(
                database: database, range: range, follow: arguments.flag("--follow") ? limits : nil, format: format)
        case .watch:
            let values = try arguments.positionals(["DB"], variadic: "KEY")
            var keys: [String] = []
            for name in values.dropFirst() { keys.append(try key(name, verb)) }
            let follow = FollowOptions(
                since: try arguments.since(), maxEvents: try arguments.count("--max-events"),
                timeout: try arguments.timeout())
            let prefix = arguments.value("--prefix")
            if let prefix, prefix.utf8.count > PersistentDefaults.Keys.maximumNameLength {
                throw UsageError("--prefix is longer than any key can be", verb: verb)
            }
            return .watch(database: values[0], keys: keys, follow: follow, format: format, prefix: prefix)
        case .check:
            return .check(database: try arguments.positionals(["DB"])[0], format: format)
        case .compact:
            let values = try arguments.positionals(["DB", "OUT"])
            return .compact(database: values[0], destination: values[1], format: format)
        case .readers:
            let database = try arguments.positionals(["DB"])[0]
            return .readers(database: database, clearStale: arguments.flag("--clear-stale"), format: format)
        case .mirror:
            let database = try arguments.positionals(["DB"])[0]
            var required: [String] = []
            for option in ["--etcd", "--etcd-prefix", "--local-prefix"] {
                guard let value = arguments.value(option), !value.isEmpty else {
                    throw UsageError("mirror needs \(option)", verb: verb)
                }
                required.append(value)
            }
            let endpoints = required[0].split(separator: ",").map { String($0) }
            for endpoint in endpoints where !(endpoint.hasPrefix("http://")) {
                throw UsageError("--etcd takes http://HOST:PORT URLs, not '\(endpoint)'", verb: verb)
            }
            return .mirror(
                database: database, endpoints: endpoints, etcdPrefix: required[1], localPrefix: required[2],
                timeout: try arguments.timeout())
        }
    }

    private static func key(_ name: String, _ verb: Verb) throws(UsageError) -> String {
        do {
            try PersistentDefaults.validateKeyName(name)
        } catch {
            throw UsageError(error.description, verb: verb)
        }
        return name
    }
}

/// A verb's arguments split into positionals and options, checked against the verb's options.
private struct ParsedArguments {
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
                throw UsageError("unknown option '\(name)' for \(verb.rawValue)\(hint)\(known)", verb: verb)
            }
            guard options[name] == nil else { throw UsageError("\(name) is given twice", verb: verb) }
            if spec.value == nil {
                guard parts.count == 1 else { throw UsageError("\(name) takes no value", verb: verb) }
                options[name] = ""
            } else if parts.count == 2 {
                options[name] = String(parts[1])
            } else {
                guard index < arguments.count else {
                    throw UsageError("\(name) needs a value \(spec.value ?? "")", verb: verb)
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

    func flag(_ name: String) -> Bool { options[name] != nil }

    func value(_ name: String) -> String? { options[name] }

    /// The positionals named `names`, all required, then any number named `variadic`.
    func positionals(_ names: [String], variadic: String? = nil) throws(UsageError) -> [String] {
        if positional.count < names.count {
            throw UsageError("missing \(names[positional.count])", verb: verb)
        }
        if variadic == nil, positional.count > names.count {
            throw UsageError("unexpected argument '\(positional[names.count])'", verb: verb)
        }
        guard !positional[0].isEmpty else { throw UsageError("the database path is empty", verb: verb) }
        return positional
    }

    func since() throws(UsageError) -> UInt64? {
        guard let text = value("--since") else { return nil }
        guard let number = UInt64(text) else {
            throw UsageError("--since needs a sequence number (0 or more), not '\(text)'", verb: verb)
        }
        return number
    }

    func count(_ name: String) throws(UsageError) -> Int? {
        guard let text = value(name) else { return nil }
        guard let number = Int(text), number > 0 else {
            throw UsageError("\(name) needs a whole number above 0, not '\(text)'", verb: verb)
        }
        return number
    }

    func timeout() throws(UsageError) -> Double? {
        guard let text = value("--timeout") else { return nil }
        guard let seconds = Double(text), seconds > 0, seconds.isFinite else {
            throw UsageError("--timeout needs a number of seconds above 0, not '\(text)'", verb: verb)
        }
        return seconds
    }
}
