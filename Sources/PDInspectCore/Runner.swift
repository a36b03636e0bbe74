import Foundation
import PersistentDefaults

/// Runs a ``Command`` against a store and says how the process should exit.
///
/// Each verb runs with the runner (`run(in:)`): it opens the store with `open(_:readOnly:)` and
/// prints through the runner's console, so tests can collect what it prints.
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
            try command.body.run(in: self)
            return .success
        } catch {
            let failure = CommandFailure(error)
            console.report(failure.message)
            return failure.code
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
}
