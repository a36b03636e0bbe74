import PersistentDefaults

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `pdinspect readers DB [--clear-stale]`: the reader lock table.
struct ReadersVerb: VerbCommand {
    var database: String
    var clearStale: Bool
    var format: OutputFormat

    static let name = "readers"
    static let synopsis = "DB [--clear-stale] [--json]"
    static let summary = "the reader lock table"
    static let options = [OptionSpec("--clear-stale", help: "first free the slots of dead processes"), .json]

    static func parse(_ arguments: ParsedArguments) throws(UsageError) -> Self {
        let database = try arguments.positionals(["DB"])[0]
        return Self(database: database, clearStale: arguments.flag("--clear-stale"), format: arguments.format)
    }

    func run(in runner: Runner) throws {
        let store = try runner.open(database)
        let cleared = clearStale ? try store.clearStaleReaders() : nil
        let own = getpid()
        // This process's own slots are left out.
        let readers = store.readerTableEntries().filter { $0.processID != own }.map { entry in
            ReadersReport.Reader(
                processID: entry.processID, thread: String(entry.thread, radix: 16), transactionID: entry.transactionID)
        }
        let maxReaders = try store.statistics().maxReaders
        if format == .json {
            try runner.printJSON(ReadersReport(maxReaders: maxReaders, clearedStale: cleared, readers: readers))
            return
        }
        var text = cleared.map { "cleared \($0) stale reader slot\($0 == 1 ? "" : "s")\n" } ?? ""
        if readers.isEmpty {
            text += "no readers besides this pdinspect (\(maxReaders) slots)\n"
        } else {
            let rows = readers.map { ["\($0.processID)", $0.thread, $0.transactionID.map { "\($0)" } ?? "-"] }
            text += TextTable.render([["PID", "THREAD", "TXNID"]] + rows)
        }
        runner.console.print(text)
    }
}

/// `readers --json`.
private struct ReadersReport: Encodable {
    struct Reader: Encodable {
        var processID: Int32
        var thread: String
        var transactionID: Int?
    }

    var maxReaders: Int
    var clearedStale: Int?
    var readers: [Reader]
}

extension Verb {
    /// `readers`
    public static let readers = Verb(ReadersVerb.self)
}

extension Command {
    /// Print the reader lock table, after freeing stale slots when `clearStale` is set.
    public static func readers(database: String, clearStale: Bool, format: OutputFormat) -> Command {
        Command(ReadersVerb(database: database, clearStale: clearStale, format: format))
    }
}
