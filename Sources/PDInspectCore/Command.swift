import PersistentDefaults

/// One parsed `pdinspect` invocation: what to do, to which store, with which options.
///
/// ```swift
/// let command = try CommandParser.parse(["get", "/var/lib/app/settings", "launchCount"])
/// // .get(database: "/var/lib/app/settings", key: "launchCount", format: .human)
/// ```
public enum Command: Sendable, Equatable {
    /// Print the overview, or one verb's help when `verb` is set.
    case help(Verb?)
    /// List the stored keys (name, type, size), optionally only those starting with `prefix`;
    /// with `all`, also the declared keys that are not stored, with their default.
    case keys(database: String, prefix: String, all: Bool = false, format: OutputFormat)
    /// Print one key's decoded value, or its declared default when it is not stored.
    case get(database: String, key: String, format: OutputFormat)
    /// Print a key's declaration, value and newest logged change.
    case describe(database: String, key: String, format: OutputFormat)
    /// Store a value under a key in one transaction; unless `force`, only of the declared type.
    case set(database: String, key: String, value: StoredValue, force: Bool = false)
    /// Remove a key.
    case delete(database: String, key: String)
    /// Print every key with its decoded value.
    case dump(database: String, format: OutputFormat)
    /// Write every key to a JSON file (`-` for standard output), types preserved.
    case export(database: String, file: String)
    /// Read a file written by `export` (`-` for standard input) and store it in one transaction;
    /// with `replace`, keys missing from the file are removed in the same transaction; unless
    /// `force`, every value must be of its key's declared type.
    case `import`(database: String, file: String, replace: Bool, force: Bool = false)
    /// Print the store's format and LMDB statistics.
    case stat(database: String, format: OutputFormat)
    /// Print the commit log, and with `follow.isFollowing` keep printing new commits.
    case log(database: String, range: LogRange, follow: FollowOptions?, format: OutputFormat)
    /// Print each committed change (of `keys`, or of every key when empty) until stopped.
    case watch(database: String, keys: [String], follow: FollowOptions, format: OutputFormat, prefix: String? = nil)
    /// Verify that every value decodes and the log is consistent.
    case check(database: String, format: OutputFormat)
    /// Write a compacted copy of the store into the directory `destination`.
    case compact(database: String, destination: String, format: OutputFormat)
    /// Print the reader lock table, after freeing stale slots when `clearStale` is set.
    case readers(database: String, clearStale: Bool, format: OutputFormat)
    /// Mirror the etcd prefix `etcdPrefix` into the local prefix `localPrefix` (see
    /// `EtcdMirror`) until SIGINT or SIGTERM, or for `timeout` seconds.
    case mirror(database: String, endpoints: [String], etcdPrefix: String, localPrefix: String, timeout: Double? = nil)
}

/// How a reading verb prints its result.
public enum OutputFormat: Sendable, Equatable {
    /// Aligned text for people.
    case human
    /// One JSON document, or one JSON object per line for streams (`log --follow`, `watch`).
    case json
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

/// How `watch` and `log --follow` follow new commits, and when they stop by themselves.
public struct FollowOptions: Sendable, Equatable {
    /// Start after this sequence number; nil for "after the newest commit at start".
    public var since: UInt64?
    /// Stop after printing this many events; nil to run until interrupted.
    public var maxEvents: Int?
    /// Stop after this many seconds; nil to run until interrupted.
    public var timeout: Double?

    /// Creates follow options.
    public init(since: UInt64? = nil, maxEvents: Int? = nil, timeout: Double? = nil) {
        self.since = since
        self.maxEvents = maxEvents
        self.timeout = timeout
    }
}
