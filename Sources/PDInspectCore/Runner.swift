import Foundation
import PersistentDefaults

/// Runs a ``Command`` against a store and says how the process should exit.
///
/// ```swift
/// let code = Runner().run(arguments: Array(CommandLine.arguments.dropFirst()))
/// exit(code.rawValue)
/// ```
public struct Runner: Sendable {
    let console: Console

    /// A runner writing to `console` (standard output and error by default).
    public init(console: Console = .standard) { self.console = console }

    /// Parses `arguments` (without the program name) and runs the command.
    public func run(arguments: [String]) -> ExitCode {
        do {
            return run(try CommandParser.parse(arguments))
        } catch {
            console.report(error.description)
            if arguments.isEmpty { console.printError("\n" + HelpText.overview) }
            return .usage
        }
    }

    /// Runs `command`; every failure becomes one line on standard error and an exit code.
    public func run(_ command: Command) -> ExitCode {
        do {
            try execute(command)
            return .success
        } catch {
            let failure = CommandFailure(error)
            console.report(failure.message)
            return failure.code
        }
    }

    private func execute(_ command: Command) throws {
        switch command {
        case .help(let verb):
            console.print(verb.map(HelpText.help(for:)) ?? HelpText.overview)
        case .keys(let database, let prefix, let all, let format):
            try keys(try open(database), prefix: prefix, all: all, format: format)
        case .get(let database, let key, let format):
            try get(try open(database), key: key, format: format)
        case .describe(let database, let key, let format):
            try describe(try open(database), key: key, format: format)
        case .set(let database, let key, let value, let force):
            try open(database, readOnly: false).write { transaction in
                if !force { try Self.checkDeclaredType(of: value, named: key, in: transaction) }
                try transaction.setStoredValue(value, named: key)
            }
        case .delete(let database, let key):
            guard try open(database, readOnly: false).removeValue(named: key) else {
                throw CommandFailure(.failure, "key \"\(key)\" is absent")
            }
        case .dump(let database, let format):
            try dump(try open(database), format: format)
        case .export(let database, let file):
            try export(try open(database), to: file)
        case .import(let database, let file, let replace, let force):
            let document = try ExportDocument.parse(try readInput(file))
            try importDocument(document, into: try open(database, readOnly: false), replace: replace, force: force)
        case .stat(let database, let format):
            try stat(try open(database), format: format)
        case .log(let database, let range, let follow, let format):
            try log(try open(database), range: range, follow: follow, format: format)
        case .watch(let database, let keys, let follow, let format, let prefix):
            try watch(try open(database), keys: keys, prefix: prefix, follow: follow, format: format)
        case .check(let database, let format):
            try check(try open(database), format: format)
        case .compact(let database, let destination, let format):
            try compact(try open(database), path: database, into: destination, format: format)
        case .readers(let database, let clearStale, let format):
            try readers(try open(database), clearStale: clearStale, format: format)
        case .mirror(let database, let endpoints, let etcdPrefix, let localPrefix, let timeout):
            try mirror(
                try PersistentDefaults(path: database), endpoints: endpoints, etcdPrefix: etcdPrefix,
                localPrefix: localPrefix, timeout: timeout)
        }
    }

    /// Opens an existing store, read-only unless asked; never creates one.
    func open(_ path: String, readOnly: Bool = true) throws -> PersistentDefaults {
        var options = PersistentDefaults.Options()
        options.readOnly = readOnly
        options.createIfMissing = false
        return try PersistentDefaults(path: path, options: options)
    }

    /// Writes `value` as one JSON document (indented) or one line.
    func printJSON(_ value: some Encodable, lines: Bool = false) throws {
        let encoder = lines ? JSONCoding.compact : JSONCoding.pretty
        console.print(String(decoding: try encoder.encode(value), as: UTF8.self) + "\n")
    }

    /// The contents of `file`, or of standard input for `-`.
    func readInput(_ file: String) throws(CommandFailure) -> Data {
        if file == "-" { return FileHandle.standardInput.readDataToEndOfFile() }
        guard let data = FileManager.default.contents(atPath: file) else {
            let reason = FileManager.default.fileExists(atPath: file) ? "it cannot be read" : "no such file"
            throw CommandFailure(.usage, "cannot read \(file): \(reason)")
        }
        return data
    }
}
