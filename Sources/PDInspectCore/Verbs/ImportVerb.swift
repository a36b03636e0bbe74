import Foundation
import PersistentDefaults

/// `pdinspect import DB FILE`: stores every key of an export file in one transaction.
struct ImportVerb: VerbCommand {
    var database: String
    var file: String
    var replace: Bool
    var force = false

    static let name = "import"
    static let synopsis = "DB FILE [--replace] [--force]"
    static let summary = "store every key of an export FILE in one transaction (- for stdin)"
    static let options = [OptionSpec("--replace", help: "also remove the keys that FILE does not list"), .force]
    static let details = """
        The whole file is validated first; a malformed file changes nothing. So does a value whose
        type is not its key's declared type (unless --force) or that is larger than 64 MiB.
        """

    static func parse(_ arguments: ParsedArguments) throws(UsageError) -> Self {
        let values = try arguments.positionals(["DB", "FILE"])
        return Self(
            database: values[0], file: values[1], replace: arguments.flag("--replace"),
            force: arguments.flag("--force"))
    }

    func run(in runner: Runner) throws {
        let document = try ExportDocument.parse(try Self.readInput(file))
        let store = try runner.open(database, readOnly: false)
        let names = document.keys.keys.sorted()
        let removed = try store.write { transaction in
            for name in names {
                let value = document.keys[name]!.value
                if !force { try transaction.checkDeclaredType(of: value, named: name) }
                try transaction.setStoredValue(value, named: name)
            }
            guard replace else { return 0 }
            let entries = try transaction.storedEntries()
            // A name that is not UTF-8 is known only repaired, another key's name: it can be
            // neither compared with the document's names nor removed.
            if let foreign = entries.first(where: { !$0.nameIsUTF8 }) {
                throw CommandFailure(
                    .unavailable,
                    "cannot replace: the stored name of key \"\(foreign.name)\" is not valid UTF-8 "
                        + "(shown repaired with U+FFFD); nothing was imported")
            }
            // By the names' bytes: a stored NFD name is not the document's NFC name.
            let kept = Set(names.map { Array($0.utf8) })
            let stale = entries.map(\.name).filter { !kept.contains(Array($0.utf8)) }
            for name in stale { try transaction.removeValue(named: name) }
            return stale.count
        }
        runner.console.print("imported \(names.count) keys" + (replace ? ", removed \(removed)" : "") + "\n")
    }

    /// The contents of `file`, or of standard input for `-`.
    private static func readInput(_ file: String) throws(CommandFailure) -> Data {
        if file == "-" { return FileHandle.standardInput.readDataToEndOfFile() }
        guard let data = FileManager.default.contents(atPath: file) else {
            let reason = FileManager.default.fileExists(atPath: file) ? "it cannot be read" : "no such file"
            throw CommandFailure(.usage, "cannot read \(file): \(reason)")
        }
        return data
    }
}

extension Verb {
    /// `import`
    public static let `import` = Verb(ImportVerb.self)
}

extension Command {
    /// Read a file written by `export` (`-` for standard input) and store it in one transaction;
    /// with `replace`, keys missing from the file are removed in the same transaction; unless
    /// `force`, every value must be of its key's declared type.
    public static func `import`(database: String, file: String, replace: Bool, force: Bool = false) -> Command {
        Command(ImportVerb(database: database, file: file, replace: replace, force: force))
    }
}
