import Foundation
import PersistentDefaults

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `pdinspect compact DB OUT`: a compacted copy of the store in the directory OUT.
struct CompactVerb: VerbCommand {
    var database: String
    var destination: String
    var format: OutputFormat

    static let name = "compact"
    static let synopsis = "DB OUT [--json]"
    static let summary = "write a compacted copy of the store into the directory OUT"
    static let options = [OptionSpec.json]
    static let details = "OUT is created when missing and must be empty; the copy leaves out free pages."

    static func parse(_ arguments: ParsedArguments) throws(UsageError) -> Self {
        let values = try arguments.positionals(["DB", "OUT"])
        return Self(database: values[0], destination: values[1], format: arguments.format)
    }

    func run(in runner: Runner) throws {
        let store = try runner.open(database)
        let created = try Self.prepareEmptyDirectory(destination, source: store.path)
        let before = try store.statistics().dataFileSize
        let size = TextTable.bytes(before, exact: false)
        runner.console.printError("compacting \(store.path) (\(size)) into \(destination) …\n")
        do {
            try store.copy(to: destination, compact: true)  // The copy has mode 0600 from its creation.
        } catch {
            // The failed copy left no data.mdb; a directory this command made goes too.
            if created { rmdir(destination) }
            throw error
        }
        let copied = destination + "/data.mdb"
        try PersistentDefaults.checkStore(at: destination)
        let after = Self.fileSize(copied)
        if format == .json {
            try runner.printJSON(
                CompactReport(source: store.path, destination: destination, sizeBefore: before, sizeAfter: after))
        } else {
            let saved = before > 0 ? Int((Double(before - after) / Double(before) * 100).rounded()) : 0
            runner.console.print(
                "compacted \(before) bytes into \(after) bytes (\(saved)% smaller): \(copied)\n")
        }
    }

    /// Creates `path` (mode 0700) when missing; otherwise it must be an empty directory that is
    /// not the source store. Returns whether it created `path`.
    private static func prepareEmptyDirectory(_ path: String, source: String) throws(CommandFailure) -> Bool {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else { throw CommandFailure(.usage, "\(path) exists and is not a directory") }
            let contents = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
            guard contents.isEmpty else { throw CommandFailure(.usage, "\(path) is not empty") }
            return false
        }
        guard mkdir(path, 0o700) == 0 else {
            throw CommandFailure(.usage, "cannot create \(path): \(String(cString: strerror(errno)))")
        }
        return true
    }

    private static func fileSize(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.intValue ?? 0
    }

}

/// `compact --json`.
private struct CompactReport: Encodable {
    var source, destination: String
    var sizeBefore, sizeAfter: Int
}

extension Verb {
    /// `compact`
    public static let compact = Verb(CompactVerb.self)
}

extension Command {
    /// Write a compacted copy of the store into the directory `destination`.
    public static func compact(database: String, destination: String, format: OutputFormat) -> Command {
        Command(CompactVerb(database: database, destination: destination, format: format))
    }
}
