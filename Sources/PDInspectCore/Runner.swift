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

    /// Parses and runs the process's arguments as their bytes (without the program name).
    /// `CommandLine.arguments` replaces bytes that are not UTF-8 with U+FFFD, so that a key name
    /// or a path given so would silently become another: such an argument is a usage error.
    public func run(argumentBytes: [[UInt8]]) -> ExitCode {
        var arguments: [String] = []
        for bytes in argumentBytes {
            guard let argument = String(validating: bytes, as: UTF8.self) else {
                let shown = bytes.map {
                    (0x20..<0x7F).contains($0) ? String(UnicodeScalar($0)) : "\\x" + String($0, radix: 16)
                }
                console.report(
                    UsageError("argument '\(shown.joined())' is not valid UTF-8; key names and paths must be")
                        .description)
                return .usage
            }
            arguments.append(argument)
        }
        return run(arguments: arguments)
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

    /// Opens an existing store, read-only unless asked; never creates one, and its commits never
    /// prune the commit log. The library reports errors that it cannot throw to `errorHandler`
    /// (by default one line on standard error).
    func open(
        _ path: String, readOnly: Bool = true,
        errorHandler: @escaping @Sendable (PersistentDefaultsError) -> Void = PersistentDefaults.Options
            .printToStandardError
    ) throws -> PersistentDefaults {
        var options = PersistentDefaults.Options()
        options.readOnly = readOnly
        options.createIfMissing = false
        options.errorHandler = errorHandler
        // Each committing process prunes the log to its own retention: an operator's commit must
        // not cut the history that the store's services keep (larger than the defaults); theirs
        // prune it as they configured.
        options.logRetention = .max
        options.logRetentionBytes = .max
        return try PersistentDefaults(path: path, options: options)
    }

    /// Writes `value` as one JSON document (indented) or one line.
    func printJSON(_ value: some Encodable, lines: Bool = false) throws {
        let encoder = lines ? JSONCoding.compact : JSONCoding.pretty
        console.print(String(decoding: try encoder.encode(value), as: UTF8.self) + "\n")
    }
}
