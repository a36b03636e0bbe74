import PersistentDefaults

/// `pdinspect stat DB`: the store's format and LMDB statistics.
struct StatVerb: VerbCommand {
    var database: String
    var format: OutputFormat

    static let name = "stat"
    static let synopsis = "DB [--json]"
    static let summary = "format version, entries, map size and use, readers, log range, file sizes"
    static let options = [OptionSpec.json]

    static func parse(_ arguments: ParsedArguments) throws(UsageError) -> Self {
        Self(database: try arguments.positionals(["DB"])[0], format: arguments.format)
    }

    func run(in runner: Runner) throws {
        let store = try runner.open(database)
        let stats = try store.statistics()
        let mirrors = try store.mirroredPrefixes()
        if format == .json {
            func database(_ stats: DatabaseStatistics) -> StatReport.Database {
                .init(
                    entries: stats.entries, depth: stats.depth, branchPages: stats.branchPages,
                    leafPages: stats.leafPages, overflowPages: stats.overflowPages)
            }
            try runner.printJSON(
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
        runner.console.print(TextTable.render(rows + mirrorRows))
    }
}

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

extension Verb {
    /// `stat`
    public static let stat = Verb(StatVerb.self)
}

extension Command {
    /// Print the store's format and LMDB statistics.
    public static func stat(database: String, format: OutputFormat) -> Command {
        Command(StatVerb(database: database, format: format))
    }
}
