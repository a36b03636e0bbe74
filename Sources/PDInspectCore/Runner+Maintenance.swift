import Foundation
import PersistentDefaults

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `stat --json`.
private struct StatReport: Encodable {
    struct Database: Encodable {
        var entries, depth, branchPages, leafPages, overflowPages: Int
    }

    var path: String
    var formatVersion: UInt32
    var keys: Int
    var logRecords: Int
    var firstLogSequence: UInt64?
    var lastLogSequence: UInt64?
    var mapSize, usedBytes, pageSize: Int
    var lastTransactionID: Int
    var readers, maxReaders: Int
    var values, log: Database
    var dataFileSize, lockFileSize: Int
    var mirrors: [Mirror]

    /// A prefix an etcd mirror owns.
    struct Mirror: Encodable {
        var localPrefix, etcdPrefix: String
        var endpoints: [String]
        var revision: Int64
        var lastApplied, lastContact: String?
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

/// `check --json`.
private struct CheckReport: Encodable {
    var ok: Bool
    var keys: Int
    var logRecords: Int
    var problems: [String]
}

/// `compact --json`.
private struct CompactReport: Encodable {
    var source, destination: String
    var sizeBefore, sizeAfter: Int
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

extension Runner {
    func stat(_ store: PersistentDefaults, format: OutputFormat) throws {
        let stats = try store.statistics()
        let mirrors = try store.mirroredPrefixes()
        if format == .json {
            func database(_ stats: DatabaseStatistics) -> StatReport.Database {
                .init(
                    entries: stats.entries, depth: stats.depth, branchPages: stats.branchPages,
                    leafPages: stats.leafPages, overflowPages: stats.overflowPages)
            }
            try printJSON(
                StatReport(
                    path: store.path, formatVersion: stats.formatVersion, keys: stats.values.entries,
                    logRecords: stats.log.entries, firstLogSequence: stats.logRange?.lowerBound,
                    lastLogSequence: stats.logRange?.upperBound, mapSize: stats.mapSize, usedBytes: stats.usedBytes,
                    pageSize: stats.pageSize, lastTransactionID: stats.lastTransactionID, readers: stats.readers,
                    maxReaders: stats.maxReaders, values: database(stats.values), log: database(stats.log),
                    dataFileSize: stats.dataFileSize, lockFileSize: stats.lockFileSize,
                    mirrors: mirrors.map {
                        StatReport.Mirror(
                            localPrefix: $0.localPrefix, etcdPrefix: $0.etcdPrefix, endpoints: $0.endpoints,
                            revision: $0.revision, lastApplied: $0.lastApplied.map(TextTable.timestamp),
                            lastContact: $0.lastContact.map(TextTable.timestamp))
                    }))
            return
        }
        let percent = stats.mapSize > 0 ? Int((Double(stats.usedBytes) / Double(stats.mapSize) * 100).rounded()) : 0
        let range = stats.logRange.map { "#\($0.lowerBound)…#\($0.upperBound)" } ?? "empty"
        let rows = [
            ["store", store.path],
            ["format version", "\(stats.formatVersion)"],
            ["entries", "\(stats.values.entries) keys, \(stats.log.entries) log records"],
            ["log range", range],
            ["map size", TextTable.bytes(stats.mapSize)],
            ["map used", TextTable.bytes(stats.usedBytes) + ", \(percent)%"],
            ["page size", "\(stats.pageSize) bytes"],
            ["tree depth", "values \(stats.values.depth), log \(stats.log.depth)"],
            [
                "pages",
                "values \(stats.values.leafPages) leaf, \(stats.values.branchPages) branch, "
                    + "\(stats.values.overflowPages) overflow",
            ],
            ["readers", "\(stats.readers) of \(stats.maxReaders) slots in use (this pdinspect holds one)"],
            ["last transaction", "\(stats.lastTransactionID)"],
            ["data.mdb", TextTable.bytes(stats.dataFileSize)],
            ["lock.mdb", TextTable.bytes(stats.lockFileSize)],
        ]
        let mirrorRows = mirrors.flatMap { mirror in
            [
                [
                    "mirror",
                    "\(mirror.localPrefix) ← etcd \(mirror.etcdPrefix) (\(mirror.endpoints.joined(separator: ",")))",
                ],
                [
                    "  applied revision",
                    "\(mirror.revision)" + (mirror.lastApplied.map { " at \(TextTable.timestamp($0))" } ?? ""),
                ],
                ["  last contact", mirror.lastContact.map(TextTable.timestamp) ?? "never"],
            ]
        }
        console.print(TextTable.render(rows + mirrorRows))
    }

    func log(_ store: PersistentDefaults, range: LogRange, follow: FollowOptions?, format: OutputFormat) throws {
        var since = range.since ?? 0
        if range.since == nil, let limit = range.limit {
            let last = try store.lastSequence()
            since = last > UInt64(limit) ? last - UInt64(limit) : 0
        }
        var records = try store.commits(after: since, limit: range.limit ?? .max)
        var remaining = follow?.maxEvents ?? .max
        records = Array(records.prefix(remaining))
        remaining -= records.count
        let streaming = follow != nil
        if format == .json && !streaming {
            try printJSON(records.map(logEntry))
        } else if records.isEmpty && !streaming {
            console.print("(no commits after #\(since))\n")
        } else {
            try printRecords(records, format: format)
        }
        guard let follow, remaining > 0 else { return }
        let deadline = follow.timeout.map { ContinuousClock.now + .seconds($0) }
        try CommitFollower(store: store).follow(
            after: records.last?.sequence ?? since, until: deadline, stop: StopSignal()
        ) { batch in
            let shown = Array(batch.prefix(remaining))
            try printRecords(shown, format: format)
            remaining -= shown.count
            return remaining > 0
        }
    }

    private func printRecords(_ records: [CommitRecord], format: OutputFormat) throws {
        if format == .json {
            for record in records { try printJSON(logEntry(record), lines: true) }
            return
        }
        var text = ""
        for record in records {
            text += "#\(record.sequence)  \(TextTable.timestamp(record.timestamp))  pid \(record.processID)\n"
            text += TextTable.render(record.changes.map(changeRow), indent: "    ")
            // Only `declare` logs a record without value changes (see `describe`).
            if record.changes.isEmpty { text += "    (no value changes: key declarations)\n" }
        }
        console.print(text)
    }

    private func changeRow(_ change: CommitRecord.Change) -> [String] {
        do throws(StoredValueError) {
            guard let value = try change.storedValue() else { return [TextTable.cell(change.key), "removed"] }
            return [TextTable.cell(change.key), value.tag.description, TextTable.cell(value.description)]
        } catch {
            return [TextTable.cell(change.key), "invalid", "(\(error))"]
        }
    }

    private func logEntry(_ record: CommitRecord) -> LogEntry {
        LogEntry(
            sequence: record.sequence, timestamp: TextTable.timestamp(record.timestamp),
            processID: record.processID,
            changes: record.changes.map { change in
                let (type, value) = Self.typed(change)
                return .init(key: change.key, removed: change.encodedValue == nil, type: type, value: value)
            })
    }

    /// A change's type and value as JSON; an undecodable value is typed `invalid` without a value.
    private static func typed(_ change: CommitRecord.Change) -> (String?, JSONValue?) {
        guard let bytes = change.encodedValue else { return (nil, nil) }
        let entry = StoredEntry(name: change.key, encodedValue: bytes)
        guard case .success(let value) = entry.decoded,
            let data = try? JSONCoding.compact.encode(TypedValue(value)),
            case .object(let object) = try? JSONCoding.decoder.decode(JSONValue.self, from: data)
        else { return ("invalid", nil) }
        return (value.tag.description, object["value"])
    }

    func watch(
        _ store: PersistentDefaults, keys: [String], prefix: String?, follow: FollowOptions, format: OutputFormat
    ) throws {
        // By the names' bytes: a key name is its UTF-8 bytes, and `String` equality would also
        // match the NFD form of an NFC name.
        let wanted = Set(keys.map { Array($0.utf8) })
        var remaining = follow.maxEvents ?? .max
        let deadline = follow.timeout.map { ContinuousClock.now + .seconds($0) }
        let start = try follow.since ?? store.lastSequence()
        let stop = StopSignal()
        if format == .human {
            var what = keys.isEmpty ? "every key" : keys.joined(separator: ", ")
            if let prefix { what = keys.isEmpty ? "keys under \"\(prefix)\"" : what + " under \"\(prefix)\"" }
            console.printError("watching \(what) after commit #\(start); interrupt to stop\n")
        }
        try CommitFollower(store: store, prefix: prefix).follow(after: start, until: deadline, stop: stop) { records in
            var rows: [[String]] = []
            for record in records {
                for change in record.changes where wanted.isEmpty || wanted.contains(Array(change.key.utf8)) {
                    guard remaining > 0 else { break }
                    remaining -= 1
                    if format == .json {
                        let (type, value) = Self.typed(change)
                        try printJSON(
                            WatchEvent(
                                sequence: record.sequence, timestamp: TextTable.timestamp(record.timestamp),
                                processID: record.processID, key: change.key, removed: change.encodedValue == nil,
                                type: type, value: value), lines: true)
                    } else {
                        rows.append(["#\(record.sequence)", TextTable.timestamp(record.timestamp)] + changeRow(change))
                    }
                }
            }
            if !rows.isEmpty { console.print(TextTable.render(rows)) }
            return remaining > 0
        }
    }

    func check(_ store: PersistentDefaults, format: OutputFormat) throws {
        let problems = try store.verify()
        let stats = try store.statistics()
        if format == .json {
            try printJSON(
                CheckReport(
                    ok: problems.isEmpty, keys: stats.values.entries, logRecords: stats.log.entries, problems: problems)
            )
        } else if problems.isEmpty {
            console.print(
                "ok: \(stats.values.entries) keys and \(stats.log.entries) log records checked, no problems\n")
        } else {
            let lines = problems.map { "  \($0)\n" }.joined()
            console.print("\(problems.count) problem\(problems.count == 1 ? "" : "s") found:\n" + lines)
        }
        if !problems.isEmpty {
            throw CommandFailure(.failure, "check found \(problems.count) problem\(problems.count == 1 ? "" : "s")")
        }
    }

    func compact(_ store: PersistentDefaults, path: String, into destination: String, format: OutputFormat) throws {
        try Self.prepareEmptyDirectory(destination, source: store.path)
        let before = try store.statistics().dataFileSize
        let size = TextTable.bytes(before, exact: false)
        console.printError("compacting \(store.path) (\(size)) into \(destination) …\n")
        try store.copy(to: destination, compact: true)  // The copy has mode 0600 from its creation.
        let copied = destination + "/data.mdb"
        try PersistentDefaults.checkStore(at: destination)
        let after = Self.fileSize(copied)
        if format == .json {
            try printJSON(
                CompactReport(source: store.path, destination: destination, sizeBefore: before, sizeAfter: after))
        } else {
            let saved = before > 0 ? Int((Double(before - after) / Double(before) * 100).rounded()) : 0
            console.print(
                "compacted \(before) bytes into \(after) bytes (\(saved)% smaller): \(copied)\n")
        }
    }

    /// Creates `path` (mode 0700) when missing; otherwise it must be an empty directory that is
    /// not the source store.
    private static func prepareEmptyDirectory(_ path: String, source: String) throws(CommandFailure) {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else { throw CommandFailure(.usage, "\(path) exists and is not a directory") }
            let contents = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
            guard contents.isEmpty else { throw CommandFailure(.usage, "\(path) is not empty") }
            return
        }
        guard mkdir(path, 0o700) == 0 else {
            throw CommandFailure(.usage, "cannot create \(path): \(String(cString: strerror(errno)))")
        }
    }

    private static func fileSize(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.intValue ?? 0
    }

    func readers(_ store: PersistentDefaults, clearStale: Bool, format: OutputFormat) throws {
        let cleared = clearStale ? try store.clearStaleReaders() : nil
        let own = getpid()
        // This process's own slots are left out.
        let readers = store.readerTableEntries().filter { $0.processID != own }.map { entry in
            ReadersReport.Reader(
                processID: entry.processID, thread: String(entry.thread, radix: 16), transactionID: entry.transactionID)
        }
        let maxReaders = try store.statistics().maxReaders
        if format == .json {
            try printJSON(ReadersReport(maxReaders: maxReaders, clearedStale: cleared, readers: readers))
            return
        }
        var text = cleared.map { "cleared \($0) stale reader slot\($0 == 1 ? "" : "s")\n" } ?? ""
        if readers.isEmpty {
            text += "no readers besides this pdinspect (\(maxReaders) slots)\n"
        } else {
            let rows = readers.map { ["\($0.processID)", $0.thread, $0.transactionID.map { "\($0)" } ?? "-"] }
            text += TextTable.render([["PID", "THREAD", "TXNID"]] + rows)
        }
        console.print(text)
    }
}
