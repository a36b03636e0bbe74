import PersistentDefaults

/// `pdinspect log DB`: the commit log, and with `--follow` each new commit.
struct LogVerb: VerbCommand {
    var database: String
    var range: LogRange
    var follow: FollowOptions?
    var format: OutputFormat

    static let name = "log"
    static let synopsis = "DB [--since N] [--limit N] [--follow] [--json]"
    static let summary = "the commit log, oldest first"
    static let options = [
        OptionSpec("--since", value: "N", help: "records after sequence number N (default: all)"),
        OptionSpec("--limit", value: "N", help: "at most N records; without --since the newest N"),
        OptionSpec("--follow", help: "keep printing new commits until interrupted"),
        .maxEvents, .timeout, .json,
    ]
    static let details = FollowOptions.details

    static func parse(_ arguments: ParsedArguments) throws(UsageError) -> Self {
        let database = try arguments.positionals(["DB"])[0]
        let range = LogRange(since: try arguments.since(), limit: try arguments.count("--limit"))
        let limits = FollowOptions(maxEvents: try arguments.count("--max-events"), timeout: try arguments.timeout())
        guard arguments.flag("--follow") || limits == FollowOptions() else {
            throw arguments.error("--max-events and --timeout need --follow")
        }
        return Self(
            database: database, range: range, follow: arguments.flag("--follow") ? limits : nil,
            format: arguments.format)
    }

    func run(in runner: Runner) throws {
        // Following, the follower opens the store, to end on what the library reports.
        let follower = try follow.map { _ in try CommitFollower(opening: database, in: runner) }
        let store = try follower?.store ?? runner.open(database)
        var since = range.since ?? 0
        if range.since == nil, let limit = range.limit {
            let last = try store.lastSequence()
            since = last > UInt64(limit) ? last - UInt64(limit) : 0
        }
        var records = try store.commits(after: since, limit: range.limit ?? .max)
        // Records after an explicit --since that the log no longer holds are an answer, not
        // "all there is" (without it the log starts where it starts).
        if range.since != nil, let first = records.first {
            try CommitFollower.checkNothingPruned(after: since, next: first.sequence)
        }
        var remaining = follow?.maxEvents ?? .max
        records = Array(records.prefix(remaining))
        remaining -= records.count
        let streaming = follow != nil
        if format == .json && !streaming {
            try runner.printJSON(records.map(Self.logEntry))
        } else if records.isEmpty && !streaming {
            runner.console.print("(no commits after #\(since))\n")
        } else {
            try printRecords(records, in: runner)
        }
        guard let follow, let follower, remaining > 0 else { return }
        let deadline = follow.deadline()
        try follower.follow(
            after: records.last?.sequence ?? since, until: deadline, stop: StopSignal()
        ) { batch in
            let shown = Array(batch.prefix(remaining))
            try printRecords(shown, in: runner)
            remaining -= shown.count
            return remaining > 0
        }
    }

    private func printRecords(_ records: [CommitRecord], in runner: Runner) throws {
        if format == .json {
            for record in records { try runner.printJSON(Self.logEntry(record), lines: true) }
            return
        }
        var text = ""
        for record in records {
            text += "#\(record.sequence)  \(TextTable.timestamp(record.timestamp))  pid \(record.processID)\n"
            text += TextTable.render(record.changes.map(\.row), indent: "    ")
            // Only `declare` logs a record without value changes (see `describe`).
            if record.changes.isEmpty { text += "    (no value changes: key declarations)\n" }
        }
        runner.console.print(text)
    }

    private static func logEntry(_ record: CommitRecord) -> LogEntry {
        LogEntry(
            sequence: record.sequence, timestamp: TextTable.timestamp(record.timestamp),
            processID: record.processID,
            changes: record.changes.map { change in
                let (type, value) = change.typedJSON
                return .init(key: change.key, removed: change.encodedValue == nil, type: type, value: value)
            })
    }

}

/// One record of `log --json`, or one change of `watch --json`.
private struct LogEntry: Encodable {
    struct Change: Encodable {
        var key: String
        var removed: Bool
        var type: String?
        var value: JSONValue?
    }

    var sequence: UInt64
    var timestamp: String
    var processID: Int32
    var changes: [Change]
}

/// Which commit-log records `pdinspect log` prints first.
public struct LogRange: Sendable, Equatable {
    /// Print records with a sequence number greater than this; nil for "the newest `limit`".
    public var since: UInt64?
    /// Print at most this many records; nil for all.
    public var limit: Int?

    /// Creates a range.
    public init(since: UInt64? = nil, limit: Int? = nil) {
        self.since = since
        self.limit = limit
    }
}

extension Verb {
    /// `log`
    public static let log = Verb(LogVerb.self)
}

extension Command {
    /// Print the commit log, and with `follow` keep printing new commits.
    public static func log(database: String, range: LogRange, follow: FollowOptions?, format: OutputFormat) -> Command {
        Command(LogVerb(database: database, range: range, follow: follow, format: format))
    }
}
