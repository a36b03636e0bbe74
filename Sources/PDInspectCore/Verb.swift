/// A verb of `pdinspect`, such as `keys` or `set`: one entry of the verb registry, ``allCases``.
///
/// Each verb lives in one file of `Verbs/` (a ``VerbCommand``: its help, its parsing and what it
/// runs). The help, the parser and the manual's verb table (checked by a test) all read the
/// registry, so adding a verb is one new file and one line here.
public struct Verb: Sendable, Hashable, CaseIterable, RawRepresentable, CustomStringConvertible {
    /// The verb's type.
    let command: any VerbCommand.Type

    init(_ command: any VerbCommand.Type) { self.command = command }

    /// Every verb, in the order `pdinspect --help` and the manual list them: the registry.
    public static let allCases: [Verb] = [
        .keys,
        .get,
        .describe,
        .set,
        .delete,
        .dump,
        .export,
        .import,
        .stat,
        .log,
        .watch,
        .check,
        .compact,
        .readers,
        .mirror,
    ]

    /// The verb named `rawValue`, when there is one.
    public init?(rawValue: String) {
        guard let verb = Self.allCases.first(where: { $0.rawValue == rawValue }) else { return nil }
        self = verb
    }

    /// The word on the command line.
    public var rawValue: String { command.name }

    /// The word on the command line.
    public var description: String { rawValue }

    /// The arguments after the verb, as the help prints them.
    public var synopsis: String { command.synopsis }

    /// One line saying what the verb does.
    public var summary: String { command.summary }

    /// The options the verb accepts.
    var options: [OptionSpec] { command.options }

    /// Extra lines for the verb's help: formats, examples and caveats.
    var details: String { command.details }

    /// Verbs are equal when they have the same name.
    public static func == (lhs: Verb, rhs: Verb) -> Bool { lhs.rawValue == rhs.rawValue }

    /// Hashes the name.
    public func hash(into hasher: inout Hasher) { hasher.combine(rawValue) }
}

/// What a parsed command does when it runs.
protocol CommandBody: Sendable, Equatable {
    /// Runs the command; a failure is thrown as a ``CommandFailure`` or a library error.
    func run(in runner: Runner) throws
}

extension CommandBody {
    /// Whether `other` is the same command with the same arguments.
    func isEqual(to other: any CommandBody) -> Bool { (other as? Self) == self }
}

/// One verb: its help, how it parses its arguments and what it runs. One type per file in
/// `Verbs/`, listed once in ``Verb/allCases``.
protocol VerbCommand: CommandBody {
    /// The word on the command line.
    static var name: String { get }
    /// The arguments after the verb, as the help prints them.
    static var synopsis: String { get }
    /// One line saying what the verb does.
    static var summary: String { get }
    /// The options the verb accepts (`--help` is added for every verb).
    static var options: [OptionSpec] { get }
    /// Extra lines for the verb's help: formats, examples and caveats; may be empty.
    static var details: String { get }
    /// Parses the arguments after the verb, already split into positionals and known options.
    static func parse(_ arguments: ParsedArguments) throws(UsageError) -> Self
}

extension VerbCommand {
    static var details: String { "" }
}

/// One option of a verb.
struct OptionSpec: Sendable {
    var name: String
    /// The placeholder of the option's value; nil for a flag.
    var value: String?
    var help: String

    init(_ name: String, value: String? = nil, help: String) {
        self.name = name
        self.value = value
        self.help = help
    }

    /// `--json`, for every verb that reads.
    static let json = OptionSpec("--json", help: "machine-readable output")
    /// `--force`, for the verbs that check a key's declared type.
    static let force = OptionSpec(
        "--force", help: "store a value even when its type is not the key's declared type")
    /// `--max-events N`, for the verbs that follow new commits.
    static let maxEvents = OptionSpec("--max-events", value: "N", help: "stop after printing N events")
    /// `--timeout SECONDS`, for the verbs that run until stopped.
    static let timeout = OptionSpec("--timeout", value: "SECONDS", help: "stop after SECONDS")
}
