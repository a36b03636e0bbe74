import PersistentDefaults

/// `pdinspect watch DB [KEY...]`: each committed change until stopped.
struct WatchVerb: VerbCommand {
    var database: String
    var keys: [String]
    var follow: FollowOptions
    var format: OutputFormat
    var prefix: String? = nil

    static let name = "watch"
    static let synopsis = "DB [KEY...] [--prefix P] [--since N] [--json]"
    static let summary = "print each committed change until interrupted"
    static let options = [
        OptionSpec("--prefix", value: "P", help: "only keys whose names start with P (compared as UTF-8 bytes)"),
        OptionSpec("--since", value: "N", help: "start after commit sequence number N"),
        .maxEvents, .timeout, .json,
    ]
    static let details = FollowOptions.details

    static func parse(_ arguments: ParsedArguments) throws(UsageError) -> Self {
        let values = try arguments.positionals(["DB"], variadic: "KEY")
        var keys: [String] = []
        for name in values.dropFirst() { keys.append(try arguments.key(name)) }
        let follow = FollowOptions(
            since: try arguments.since(), maxEvents: try arguments.count("--max-events"),
            timeout: try arguments.timeout())
        let prefix = arguments.value("--prefix")
        if let prefix, prefix.utf8.count > PersistentDefaults.Keys.maximumNameLength {
            throw arguments.error("--prefix is longer than any key can be")
        }
        return Self(database: values[0], keys: keys, follow: follow, format: arguments.format, prefix: prefix)
    }

    func run(in runner: Runner) throws {
        let follower = try CommitFollower(opening: database, in: runner, prefix: prefix)
        let store = follower.store
        // By the names' bytes: a key name is its UTF-8 bytes, and `String` equality would also
        // match the NFD form of an NFC name.
        let wanted = Set(keys.map { Array($0.utf8) })
        var remaining = follow.maxEvents ?? .max
        let deadline = follow.deadline()
        let start = try follow.since ?? store.lastSequence()
        let stop = StopSignal()
        if format == .human {
            var what = keys.isEmpty ? "every key" : keys.joined(separator: ", ")
            if let prefix { what = keys.isEmpty ? "keys under \"\(prefix)\"" : what + " under \"\(prefix)\"" }
            runner.console.printError("watching \(what) after commit #\(start); interrupt to stop\n")
        }
        try follower.follow(after: start, until: deadline, stop: stop) { records in
            var rows: [[String]] = []
            for record in records {
                for change in record.changes where wanted.isEmpty || wanted.contains(Array(change.key.utf8)) {
                    guard remaining > 0 else { break }
                    remaining -= 1
                    if format == .json {
                        let (type, value) = change.typedJSON
                        try runner.printJSON(
                            WatchEvent(
                                sequence: record.sequence, timestamp: TextTable.timestamp(record.timestamp),
                                processID: record.processID, key: change.key, removed: change.encodedValue == nil,
                                type: type, value: value), lines: true)
                    } else {
                        rows.append(["#\(record.sequence)", TextTable.timestamp(record.timestamp)] + change.row)
                    }
                }
            }
            if !rows.isEmpty { runner.console.print(TextTable.render(rows)) }
            return remaining > 0
        }
    }
}

/// One change of `watch --json`: `{"sequence","timestamp","processID","key","removed","type","value"}`.
private struct WatchEvent: Encodable {
    var sequence: UInt64
    var timestamp: String
    var processID: Int32
    var key: String
    var removed: Bool
    var type: String?
    var value: JSONValue?
}

extension Verb {
    /// `watch`
    public static let watch = Verb(WatchVerb.self)
}

extension Command {
    /// Print each committed change (of `keys`, or of every key when empty) until stopped.
    public static func watch(
        database: String, keys: [String], follow: FollowOptions, format: OutputFormat, prefix: String? = nil
    ) -> Command {
        Command(WatchVerb(database: database, keys: keys, follow: follow, format: format, prefix: prefix))
    }
}
